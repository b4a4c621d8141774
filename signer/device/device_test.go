package device

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/chain"
)

func newDevice(t *testing.T) *Device {
	t.Helper()
	k, err := NewChainKeys()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Create(filepath.Join(t.TempDir(), "first"), k)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testInvite(t *testing.T, d *Device, withKey bool, exp time.Time) string {
	t.Helper()
	in, err := NewInvite(d, []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"},
		[]byte("0123456789abcdef"), exp, withKey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreateOpen(t *testing.T) {
	d := newDevice(t)
	if d.Key == nil || !d.Founder || d.ID == "" {
		t.Fatalf("%+v", d)
	}
	st, err := os.Stat(d.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	again, err := Open(d.Dir)
	if err != nil || again.ID != d.ID || again.Chain != d.Chain || !bytes.Equal(again.PSK, d.PSK) {
		t.Fatalf("reopen: %+v %v", again, err)
	}
	if _, err := Create(d.Dir, Keys{PSK: d.PSK, Chain: d.Chain}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("open empty: %v", err)
	}
	cfg := d.Config()
	if cfg.DataDir != d.Dir || cfg.Chain != d.Chain || cfg.ChainKey == nil || !cfg.Bootstrap {
		t.Fatalf("config: %+v", cfg)
	}
	// A replica's config has a nil ChainKey interface, not a typed nil.
	r, err := Create(filepath.Join(t.TempDir(), "r"), Keys{PSK: d.PSK, Chain: d.Chain})
	if err != nil {
		t.Fatal(err)
	}
	if r.Config().ChainKey != nil {
		t.Fatal("replica config has a chain key")
	}
}

func TestInviteRoundTrip(t *testing.T) {
	d := newDevice(t)
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	s := testInvite(t, d, true, exp)
	if !strings.HasPrefix(s, InvitePrefix) || strings.ContainsAny(s, " \n=+/") {
		t.Fatalf("not a one-line url-safe token: %q", s)
	}
	got, err := ReadInvite(strings.NewReader(s+"\n"), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	if got.Chain != d.Chain || !bytes.Equal(got.PSK, d.PSK) || !got.Expires.Equal(exp) || got.Key == nil ||
		got.Key.DID() != d.Chain || got.Expired(time.Now()) || got.Matches(d) != nil {
		t.Fatalf("round trip: %+v", got)
	}
	if again, err := got.Encode(); err != nil || again != s {
		t.Fatalf("re-encode: %v", err)
	}
	noKey, err := ParseInvite(testInvite(t, d, false, exp))
	if err != nil || noKey.Key != nil {
		t.Fatalf("no key: %+v %v", noKey, err)
	}
}

func TestInviteBad(t *testing.T) {
	d := newDevice(t)
	good := testInvite(t, d, true, time.Now().Add(time.Hour))
	raw, _ := base64.RawURLEncoding.DecodeString(good[len(InvitePrefix):])
	mutate := func(f func(m map[string]any)) string {
		var m map[string]any
		json.Unmarshal(raw, &m)
		f(m)
		b, _ := json.Marshal(m)
		return InvitePrefix + base64.RawURLEncoding.EncodeToString(b)
	}
	other, _ := chain.GenerateKey(nil)
	for name, s := range map[string]string{
		"empty":     "",
		"prefix":    "baton2" + good[6:],
		"truncated": good[:len(good)-7] + "!",
		"json":      InvitePrefix + base64.RawURLEncoding.EncodeToString([]byte("{")),
		"version":   mutate(func(m map[string]any) { m["v"] = 2 }),
		"unknown":   mutate(func(m map[string]any) { m["x"] = 1 }),
		"net":       mutate(func(m map[string]any) { m["net"] = "AAAA" }),
		"chain":     mutate(func(m map[string]any) { m["chain"] = "did:key:zzz" }),
		"key":       mutate(func(m map[string]any) { m["chain"] = other.DID() }),
		"addrs":     mutate(func(m map[string]any) { m["addrs"] = []string{} }),
		"addr":      mutate(func(m map[string]any) { m["addrs"] = []string{"/ip4/1.2.3.4/tcp/1"} }),
		"token":     mutate(func(m map[string]any) { m["token"] = "" }),
		"exp":       mutate(func(m map[string]any) { delete(m, "exp") }),
		"long":      InvitePrefix + strings.Repeat("A", MaxInviteLen),
	} {
		if _, err := ParseInvite(s); !errors.Is(err, ErrBadInvite) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A refused or expired invite leaves nothing behind: PrepareJoin refuses an expired
// one before writing, and Undo removes what a failed start wrote.
func TestPrepareJoinLeavesNothing(t *testing.T) {
	d := newDevice(t)
	dir := filepath.Join(t.TempDir(), "new")
	expired, err := ParseInvite(testInvite(t, d, true, time.Now().Add(-time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := PrepareJoin(dir, expired, false, time.Now()); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("expired invite left %s: %v", dir, err)
	}
	inv, _ := ParseInvite(testInvite(t, d, true, time.Now().Add(time.Hour)))
	nd, cfg, att, err := PrepareJoin(dir, inv, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Join == nil || cfg.Bootstrap || nd.Key == nil || nd.Founder {
		t.Fatalf("join config: %+v", cfg)
	}
	// What a failed start writes besides the keys goes too.
	os.WriteFile(filepath.Join(dir, "raft.db"), []byte("x"), 0o600)
	os.Mkdir(filepath.Join(dir, "snapshots"), 0o700)
	if err := att.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("undo left %s: %v", dir, err)
	}
	// An existing dir keeps what it held before.
	keep := t.TempDir()
	os.WriteFile(filepath.Join(keep, "mine.txt"), []byte("x"), 0o600)
	_, _, att, err = PrepareJoin(keep, inv, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := att.Undo(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(keep)
	if len(ents) != 1 || ents[0].Name() != "mine.txt" {
		t.Fatalf("undo in an existing dir: %v", ents)
	}
	// An invite for another chain is refused for an initialized dir.
	other := newDevice(t)
	inv2, _ := ParseInvite(testInvite(t, other, true, time.Now().Add(time.Hour)))
	if _, _, _, err := PrepareJoin(d.Dir, inv2, false, time.Now()); !errors.Is(err, ErrWrongChain) {
		t.Fatalf("wrong chain: %v", err)
	}
}

func TestRemovedMarker(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadRemoved(dir); ok || err != nil {
		t.Fatal(ok, err)
	}
	at := time.Now().Truncate(time.Second)
	if err := MarkRemoved(dir, Removal{At: at, How: "left"}); err != nil {
		t.Fatal(err)
	}
	r, ok, err := ReadRemoved(dir)
	if !ok || err != nil || r.How != "left" || !r.At.Equal(at) {
		t.Fatalf("%+v %v %v", r, ok, err)
	}
	if err := RemovedError(dir, r); !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), "baton leave") {
		t.Fatal(err)
	}
}
