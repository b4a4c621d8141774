package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
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
	for _, name := range fieldNames(v, func(reflect.Type) bool { return true }) {
		out[name] = true
	}
	return out
}

// fieldNames returns the JSON names of the exported fields of the struct v points to
// whose type keep accepts, in order.
func fieldNames(v any, keep func(reflect.Type) bool) []string {
	var out []string
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || !keep(f.Type) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// decodeError says which field of v a JSON decoding error is about and what the field
// takes, in the API's words rather than encoding/json's (which names Go's types, or for
// a []byte field nothing but "illegal base64 data").
func decodeError(err error, v any) error {
	var te *json.UnmarshalTypeError
	var be base64.CorruptInputError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%w: field %q: a JSON %s where %s is expected", node.ErrBadRequest, te.Field, te.Value, jsonKind(te.Type))
	case errors.As(err, &be):
		if names := bytesFields(v); len(names) == 1 {
			return fmt.Errorf("%w: field %q is the bytes in standard base64 with padding (\"hi\" is \"aGk=\"): %v", node.ErrBadRequest, names[0], err)
		}
		return fmt.Errorf("%w: a bytes field is not standard base64 with padding: %v", node.ErrBadRequest, err)
	}
	return fmt.Errorf("%w: %v", node.ErrBadRequest, err)
}

// jsonKind names what a Go type takes in JSON.
func jsonKind(t reflect.Type) string {
	switch {
	case t == nil:
		return "a value"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return "a base64 string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	}
	return "a value"
}

// bytesFields returns the JSON names of the []byte fields of the struct v points to.
func bytesFields(v any) []string {
	return fieldNames(v, func(t reflect.Type) bool { return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 })
}
