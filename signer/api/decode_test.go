package api

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/node"
)

// TestIntentDecodeErrorsNameFieldAndRule: a bad submit body is answered with the
// field and the rule it broke, in the API's words, not encoding/json's (issue 39
// item 4: `"value":"hi"` answered `illegal base64 data at input byte 0`, naming
// neither the field nor the encoding).
func TestIntentDecodeErrorsNameFieldAndRule(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"value_not_base64", `{"id":"a","op":"put","path":"app.test/a","value":"hi"}`,
			[]string{`"value"`, "base64", "aGk="}},
		{"id_number", `{"id":12,"op":"put","path":"app.test/a"}`, []string{`"id"`, "string", "number"}},
		{"op_missing", `{"id":"a","path":"app.test/a"}`, []string{`"op"`, "put", "del"}},
		{"id_missing", `{"op":"put","path":"app.test/a"}`, []string{`"id"`, "idempotency"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/intents", strings.NewReader(tc.body))
			_, _, _, err := decodeIntent(httptest.NewRecorder(), r)
			if !errors.Is(err, node.ErrBadRequest) && !errors.Is(err, node.ErrBadPath) {
				t.Fatalf("err = %v, want a bad request", err)
			}
			msg := Message(err)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %s", msg, w)
				}
			}
			if strings.Contains(msg, "Go struct") || strings.Contains(msg, "IntentRequest") {
				t.Errorf("message %q names Go's types", msg)
			}
		})
	}
}
