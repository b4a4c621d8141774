package device

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

const testPLC = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"

// TestCreateAtprotoRepo: a new atproto chain with a K-256 key and a did:plc keeps the
// key (type k256) and the repository DID in device.json, and the node's config names
// it for the genesis; a malformed did:plc, a repository DID on a baton chain or on a
// device that does not found the chain are refused before anything is written, and a
// device.json whose repo was edited into a malformed one does not open.
func TestCreateAtprotoRepo(t *testing.T) {
	k, err := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := NewAtprotoChainKeys(k, testPLC)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "a")
	d, err := Create(dir, keys)
	if err != nil {
		t.Fatal(err)
	}
	if d.Repo != testPLC || d.AnyKey == nil || d.AnyKey.DID() != k.DID() || d.Chain != k.DID() {
		t.Fatalf("device: %+v", d)
	}
	if cfg := d.Config(); cfg.RepoDID != testPLC || !cfg.Bootstrap {
		t.Fatalf("config: %+v", cfg)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ChainKeyFile))
	if !strings.Contains(string(raw), `"k256"`) {
		t.Fatalf("chain.key: %s", raw)
	}
	ed, _ := NewChainKeys()
	for name, tc := range map[string]Keys{
		"malformed did:plc": func() Keys { k := keys; k.Repo = "did:plc:nope"; return k }(),
		"did:web":           func() Keys { k := keys; k.Repo = "did:web:example.com"; return k }(),
		"not the founder":   func() Keys { k := keys; k.Founder = false; return k }(),
		"a baton chain":     func() Keys { k := ed; k.Repo = testPLC; return k }(),
	} {
		dir := filepath.Join(t.TempDir(), "x")
		if _, err := Create(dir, tc); err == nil {
			t.Errorf("%s: created", name)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: left %s behind", name, dir)
		}
	}
	doc := filepath.Join(dir, DeviceFile)
	b, _ := os.ReadFile(doc)
	if err := os.WriteFile(doc, []byte(strings.Replace(string(b), testPLC, "did:plc:Ewvi7nxzyoun6zhxrhs64oiz", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, chain.ErrInvalidDID) {
		t.Fatalf("open with a malformed repo: %v", err)
	}
}
