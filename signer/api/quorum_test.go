package api

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

// TestSubmitWithoutQuorumAnswersAtOnce: a submit to a device that knows it has no
// quorum (no leader heard for an election timeout, fewer voters reachable than a
// majority: what /v1/state already says) is answered at once with no_quorum and
// "nothing was submitted", instead of blocking for the 30 s default while the state
// says the quorum is lost (issue 39 item 4); and timeout= bounds a submit's wait.
func TestSubmitWithoutQuorumAnswersAtOnce(t *testing.T) {
	root, psk, key := t.TempDir(), testutil.PSK(t), testutil.Key(t, 3)
	cfg := nodeConfig(t, filepath.Join(root, "a"), psk, key)
	cfg.Bootstrap = true
	a := startServed(t, cfg, Config{})
	testutil.WaitFor(t, 10*time.Second, "a holds", a.Holds)
	token := []byte("join-token-0123456789")
	a.AllowJoins(token, time.Now().Add(time.Minute), 2)
	var others []*served
	for _, name := range []string{"b", "c"} {
		c := nodeConfig(t, filepath.Join(root, name), psk, key)
		c.Join = &node.JoinConfig{Seeds: a.Addrs(), Token: token}
		others = append(others, startServed(t, c, Config{}))
	}
	testutil.WaitFor(t, 20*time.Second, "three voters on a", func() bool { return a.State().Quorum.Voters == 3 })
	hc := rawHTTP(a.APISocket())
	if status, ej, body := doRaw(t, hc, "POST", "/v1/intents?timeout=1m", `{"id":"q0","op":"put","path":"app.test/q"}`); status != 400 ||
		!strings.Contains(ej.Message, "at most 30s") {
		t.Fatalf("timeout=1m: %d %s", status, trim(body))
	}
	if status, _, body := doRaw(t, hc, "POST", "/v1/intents?timeout=20s", `{"id":"q1","op":"put","path":"app.test/q"}`); status != 202 {
		t.Fatalf("a submit with a quorum: %d %s", status, trim(body))
	}
	for _, o := range others {
		_ = o.Kill()
	}
	testutil.WaitFor(t, 30*time.Second, "a knows the quorum is lost", func() bool { return a.QuorumLost() != nil })
	status, ej, body := doRaw(t, hc, "POST", "/v1/intents", `{"id":"q2","op":"put","path":"app.test/q"}`)
	if status != 503 || ej.Error != CodeNoQuorum || !strings.Contains(ej.Message, "nothing was submitted") ||
		!strings.Contains(ej.Message, "of 3 voters") {
		t.Fatalf("a submit without a quorum: %d %s", status, trim(body))
	}
	if st := a.State(); st.Quorum.OK {
		t.Fatalf("answered no_quorum while the state says %+v", st.Quorum)
	}
}
