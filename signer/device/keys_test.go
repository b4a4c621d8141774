package device

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/intentlog"
)

// giveHistory makes dir look like a device that has run: a Raft log of its own.
// intentlog.HasState looks at raft.db's presence and size only.
func giveHistory(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, intentlog.RaftFile), []byte("raft log"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func wantSays(t *testing.T, err error, says ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one saying %q", says)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%q does not say %q", err, s)
		}
	}
}

// Issue 20 item 5: a deleted identity.key was silently regenerated, and the device ran
// "healthy" as a stranger on its old raft.db. With history it refuses to start, says
// what to do and creates nothing; a dir without history still gets a new one.
func TestOpenRefusesMissingIdentityWithHistory(t *testing.T) {
	d := newDevice(t)
	idPath := filepath.Join(d.Dir, IdentityFile)
	if err := os.Remove(idPath); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(d.Dir); err != nil { // no history yet: a new identity is fine
		t.Fatal(err)
	}
	giveHistory(t, d.Dir)
	if err := os.Remove(idPath); err != nil {
		t.Fatal(err)
	}
	_, err := Open(d.Dir)
	if !errors.Is(err, ErrMissingKey) {
		t.Fatalf("Open = %v, want ErrMissingKey", err)
	}
	wantSays(t, err, IdentityFile, "restore", "remove")
	if _, serr := os.Stat(idPath); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("Open created %s: %v", IdentityFile, serr)
	}
}

// A deleted chain.key silently turned a signer into a replica. A device made with the
// chain key refuses to start without it (history or not); one made without it is a
// replica and says so.
func TestOpenRefusesMissingChainKey(t *testing.T) {
	d := newDevice(t)
	if err := os.Remove(filepath.Join(d.Dir, ChainKeyFile)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(d.Dir)
	if !errors.Is(err, ErrMissingKey) {
		t.Fatalf("Open = %v, want ErrMissingKey", err)
	}
	wantSays(t, err, ChainKeyFile, "restore", "replica")

	r, err := Create(filepath.Join(t.TempDir(), "r"), Keys{PSK: d.PSK, Chain: d.Chain})
	if err != nil {
		t.Fatal(err)
	}
	giveHistory(t, r.Dir)
	if r, err = Open(r.Dir); err != nil || r.Key != nil || !r.Replica {
		t.Fatalf("replica: %+v, %v", r, err)
	}
}

// A device.json written before devices said whether they sign: a founder (it always had
// the chain key) with history refuses without chain.key; any other is taken for a
// replica, and Replica says so (baton run logs it at start).
func TestOpenOldDeviceFileWithoutChainKey(t *testing.T) {
	d := newDevice(t)
	rewrite := func(doc Doc) {
		t.Helper()
		b, _ := json.Marshal(doc)
		if err := os.WriteFile(filepath.Join(d.Dir, DeviceFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(d.Dir, ChainKeyFile)); err != nil {
		t.Fatal(err)
	}
	giveHistory(t, d.Dir)
	rewrite(Doc{Version: 1, Chain: d.Chain, First: true})
	_, err := Open(d.Dir)
	if !errors.Is(err, ErrMissingKey) {
		t.Fatalf("old founder without chain.key: %v", err)
	}
	rewrite(Doc{Version: 1, Chain: d.Chain})
	r, err := Open(d.Dir)
	if err != nil || r.Key != nil || !r.Replica {
		t.Fatalf("old replica: %+v, %v", r, err)
	}
}
