package api

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

// TestAPIJoinWindow: POST /v1/join-window opens a join window (a device presenting
// the token joins) and answers the addresses; bad requests get a 4xx and open nothing.
func TestAPIJoinWindow(t *testing.T) {
	psk, key := testutil.PSK(t), testutil.Key(t, 4)
	cfg := nodeConfig(t, t.TempDir(), psk, key)
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{})
	c, err := NewClient(n.APISocket(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	token := []byte("join-window-token-0123456789")
	for name, tc := range map[string]struct {
		token []byte
		until time.Time
	}{
		"short token": {[]byte("short"), time.Now().Add(time.Minute)},
		"long token":  {make([]byte, MaxJoinTokenLen+1), time.Now().Add(time.Minute)},
		"past":        {token, time.Now().Add(-time.Second)},
		"too far":     {token, time.Now().Add(MaxJoinWindowOpen + time.Hour)},
	} {
		_, err := c.AllowJoin(ctx, tc.token, tc.until)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !errors.Is(err, node.ErrBadRequest) {
			t.Errorf("%s: %v, want 400 bad_request", name, err)
		}
	}
	// Unknown fields and malformed JSON are refused too.
	for _, body := range []string{`{"token":"AAAA","until":"2099-01-01T00:00:00Z","x":1}`, `{"token":`} {
		resp, err := c.hc.Post(c.base+"/v1/join-window", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d", body, resp.StatusCode)
		}
	}

	// Nothing was opened: a join with the token fails.
	cfg2 := nodeConfig(t, t.TempDir(), psk, key)
	cfg2.Join = &node.JoinConfig{Seeds: n.Addrs(), Token: token}
	jctx, jcancel := context.WithTimeout(ctx, 2*time.Second)
	if n2, err := node.Start(jctx, cfg2); err == nil {
		_ = n2.Kill()
		t.Fatal("joined without an open window")
	}
	jcancel()

	w, err := c.AllowJoin(ctx, token, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != n.ID() || w.Chain != key.DID() || len(w.Addrs) == 0 {
		t.Fatalf("answer: %+v", w)
	}
	cfg3 := nodeConfig(t, t.TempDir(), psk, key)
	cfg3.Join = &node.JoinConfig{Seeds: w.Addrs, Token: token}
	n3 := startServed(t, cfg3, Config{})
	testutil.WaitFor(t, 10*time.Second, "two members", func() bool { return n.State().Members == 2 && n3.State().Members == 2 })
}
