package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/batonhq/baton/signer/node"
)

// strictKeys refuses a JSON object body whose top-level keys encoding/json would
// accept loosely: a key given twice (encoding/json keeps the last one) or a key that
// matches a field of v only case-insensitively ("ID" for "id"). Either way the
// request might not mean what the caller read in it (the idempotency ID stored would
// not be the one the client meant), so it is a bad request. A body that is not an
// object is left to the decoder's own error.
func strictKeys(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	fields := jsonFields(v)
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil // the decoder reports it
		}
		key, ok := tok.(string)
		if !ok {
			return nil
		}
		if seen[key] {
			return fmt.Errorf("%w: field %q given twice", node.ErrBadRequest, key)
		}
		seen[key] = true
		if !fields[key] {
			for f := range fields {
				if strings.EqualFold(f, key) {
					return fmt.Errorf("%w: unknown field %q (field names are case-sensitive: %q)", node.ErrBadRequest, key, f)
				}
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// jsonFields returns the JSON names of the exported fields of the struct v points to.
func jsonFields(v any) map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = true
	}
	return out
}
