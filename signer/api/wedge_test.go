package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

// oddInputs are intents the apply refuses, one or more for every reason the apply
// can give for an op, each with the API code that reason maps to. Every one must be
// refused at the API with that code and reach no commit.
func oddInputs() []struct{ name, body, code string } {
	big := func(n int) string { return strings.Repeat("a", n) }
	val := base64.StdEncoding.EncodeToString(make([]byte, intentlog.MaxValueLen+1))
	return []struct{ name, body, code string }{
		{"control U+0001 in id", `{"id":"bad\u0001id","op":"put","path":"app/b","value":"aGk="}`, CodeBadRequest},
		{"NUL in id", `{"id":"bad\u0000id","op":"put","path":"app/b","value":"aGk="}`, CodeBadRequest},
		{"DEL in id", `{"id":"bad` + "\u007f" + `id","op":"put","path":"app/b"}`, CodeBadRequest},
		{"C1 control in id", `{"id":"bad\u0085id","op":"put","path":"app/b"}`, CodeBadRequest},
		{"empty id", `{"id":"","op":"put","path":"app/b"}`, CodeBadRequest},
		{"unknown op", `{"id":"x1","op":"get","path":"app/b"}`, CodeBadRequest},
		{"value on del", `{"id":"x2","op":"del","path":"app/b","value":"aGk="}`, CodeBadRequest},
		{"path without /", `{"id":"x3","op":"put","path":"appb"}`, CodeBadPath},
		{"path with ..", `{"id":"x4","op":"put","path":"app/../b"}`, CodeBadPath},
		{"path with .", `{"id":"x5","op":"put","path":"app/./b"}`, CodeBadPath},
		{"path with space", `{"id":"x6","op":"put","path":"app/b c"}`, CodeBadPath},
		{"path non-ASCII", `{"id":"x7","op":"put","path":"app/\u00e9"}`, CodeBadPath},
		{"id too long", `{"id":"` + big(intentlog.MaxIDLen+1) + `","op":"put","path":"app/b"}`, CodeTooLarge},
		{"path too long", `{"id":"x8","op":"put","path":"app/` + big(intentlog.MaxPathLen) + `"}`, CodeTooLarge},
		{"value too long", `{"id":"x9","op":"put","path":"app/b","value":"` + val + `"}`, CodeTooLarge},
		{"duplicate key", `{"id":"a","id":"b","op":"put","path":"app/b"}`, CodeBadRequest},
		{"case variant of a field", `{"ID":"c","op":"put","path":"app/b"}`, CodeBadRequest},
		{"case variant beside the field", `{"id":"c","Id":"d","op":"put","path":"app/b"}`, CodeBadRequest},
	}
}

// TestOddIntentsAtTheSocket (issue 19.1): every input the apply would refuse is
// refused at the socket API with the apply's reason, waiting for nothing; the holder
// signs no commit the apply refuses and goes on signing.
func TestOddIntentsAtTheSocket(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 8))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{})
	testutil.WaitFor(t, 10*time.Second, "the lease", n.Holds)
	hc := rawHTTP(n.APISocket())
	for i, in := range oddInputs() {
		start := time.Now()
		status, ej, body := doRaw(t, hc, http.MethodPost, "/v1/intents?wait=signed", in.body)
		if ej.Error != in.code || status/100 != 4 {
			t.Errorf("%s: %d %s, want %s", in.name, status, body, in.code)
		}
		// Refused at the entrance, not after waiting for a signature that never
		// comes (the old wedge answered at the submit timeout): well before it.
		if d := time.Since(start); d > node.DefaultSubmitTimeout/3 {
			t.Errorf("%s: answered after %v", in.name, d)
		}
		ok := fmt.Sprintf(`{"id":"ok-%d","op":"put","path":"app/b","value":"aGk="}`, i)
		if status, _, body := doRaw(t, hc, http.MethodPost, "/v1/intents?wait=signed", ok); status != http.StatusOK {
			t.Fatalf("after %s a valid intent: %d %s", in.name, status, body)
		}
	}
	st := n.Node.State().Loop
	if st.CommitsRejected != 0 || st.SignedRefused != 0 {
		t.Errorf("loop: rejected %d, signed-refused %d (want 0)", st.CommitsRejected, st.SignedRefused)
	}
}

// TestHealthzShowsDefect: a commit refused for its content (the entrances' check
// off by a knob) is shown as a defect in /healthz (200: signing goes on) and the
// state.
func TestHealthzShowsDefect(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 10))
	cfg.Bootstrap = true
	cfg.Knobs = &knobs.Node{Signer: &knobs.Signer{SkipValidation: true}}
	n := startServed(t, cfg, Config{})
	testutil.WaitFor(t, 10*time.Second, "the lease", n.Holds)
	hc := rawHTTP(n.APISocket())
	// The API's own check is not a knob: go through the Go API, whose check is.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.Node.Submit(ctx, intentlog.Intent{ID: "bad\u0001id", Op: intentlog.OpPut, Path: "app/b"}, node.WaitSigned); !errors.Is(err, node.ErrBadRequest) {
		t.Fatalf("submit: %v", err)
	}
	status, _, body := doRaw(t, hc, http.MethodGet, "/healthz", "")
	var h struct {
		OK     bool   `json:"ok"`
		Defect string `json:"defect"`
	}
	if err := json.Unmarshal(body, &h); err != nil || status != http.StatusOK || !h.OK || !strings.Contains(h.Defect, "bad_ops") {
		t.Fatalf("/healthz: %d %s", status, body)
	}
	if st := n.Node.State(); !strings.Contains(st.Defect, "bad_ops") {
		t.Fatalf("state defect %q", st.Defect)
	}
}
