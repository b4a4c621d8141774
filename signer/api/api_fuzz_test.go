package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/batonhq/baton/intentlog"
)

// FuzzDecodeIntent: any body and wait parameter either decode into an intent the
// apply accepts on its own terms, or are refused with a 4xx code; never a panic, never
// a 5xx.
func FuzzDecodeIntent(f *testing.F) {
	for _, seed := range []struct{ wait, body string }{
		{"", `{"id":"a","op":"put","path":"c/r","value":"aGk="}`},
		{"signed", `{"id":"a","op":"del","path":"c/r"}`},
		{"", `{"id":"a","op":"put","path":"c/r","value":"@@"}`},
		{"x", `{}`},
		{"", `{"id":"","op":"put","path":"c/r"}`},
		{"", `{"id":"a","op":"put","path":"__lease__"}`},
		{"", `{"id":"a","op":"put","path":"c/r"} trailing`},
		{"", `{"id":"a","op":"put","path":"c/r","extra":true}`},
		{"", `[1,2,3]`},
		{"", `null`},
	} {
		f.Add(seed.wait, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, wait string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/intents", strings.NewReader(string(body)))
		q := req.URL.Query()
		q.Set("wait", wait)
		req.URL.RawQuery = q.Encode()
		in, _, _, err := decodeIntent(httptest.NewRecorder(), req)
		if err != nil {
			code, status := Code(err)
			if status < 400 || status >= 500 {
				t.Fatalf("refusal %v has status %d (code %s)", err, status, code)
			}
			return
		}
		if in.ID == "" || len(in.ID) > intentlog.MaxIDLen || !intentlog.ValidPath(in.Path) ||
			len(in.Value) > intentlog.MaxValueLen || (in.Op != intentlog.OpPut && in.Op != intentlog.OpDel) ||
			(in.Op == intentlog.OpDel && in.Value != nil) || (in.Op == intentlog.OpPut && in.Value == nil) {
			t.Fatalf("accepted an intent the apply would refuse: %+v", in)
		}
	})
}

// FuzzXRPCRecordParams: any query of getRecord either names a DID and a valid record
// path, or is refused with a 400 InvalidRequest; never a panic, never a 5xx.
func FuzzXRPCRecordParams(f *testing.F) {
	f.Add("did=did:key:zDnaeqbhuakvLzWF6LaY8NkcJMp6rGwZSQp71QUKecMQ6bgC9&collection=app.bsky.feed.post&rkey=3k")
	f.Add("did=x&collection=a..b&rkey=..")
	f.Add("did=did:plc:a&collection=app.bsky.feed.post&rkey=3k&rkey=3j")
	f.Add("did=%zz")
	f.Add("")
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := httptest.NewRequest(http.MethodGet, "/xrpc/com.atproto.sync.getRecord", nil)
		req.URL.RawQuery = rawQuery
		did, path, err := recordParams(req, "did")
		if err != nil {
			w := httptest.NewRecorder()
			writeXRPCError(w, err)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"error":"InvalidRequest"`) {
				t.Fatalf("refusal %v answered %d %s", err, w.Code, w.Body)
			}
			return
		}
		if !strings.HasPrefix(did, "did:") || !intentlog.ValidPath(path) {
			t.Fatalf("accepted did %q path %q", did, path)
		}
	})
}
