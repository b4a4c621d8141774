package atproto

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton/signer/chain"
)

// TestKeyFile: a P-256 chain key round-trips through the chain key file (type p256,
// 0600, never overwritten); LoadKey (Ed25519 only) refuses it with a clear type error;
// a file whose did is not its key's is refused.
func TestKeyFile(t *testing.T) {
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "chain.key")
	if err := SaveKey(path, k); err != nil {
		t.Fatal(err)
	}
	if err := SaveKey(path, k); !errors.Is(err, chain.ErrKeyExists) {
		t.Fatalf("second save: %v", err)
	}
	got, err := chain.LoadAnyKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.DID() != k.DID() || !IsP256DID(got.DID()) {
		t.Fatalf("loaded %s, saved %s", got.DID(), k.DID())
	}
	sig, err := got.Sign([]byte("msg"))
	if err != nil || len(sig) != 64 {
		t.Fatalf("sign: %d bytes, %v", len(sig), err)
	}
	if _, err := chain.LoadKey(path); !errors.Is(err, chain.ErrUnsupportedKeyType) {
		t.Fatalf("LoadKey of a p256 file: %v", err)
	}
	other, _ := GenerateKey()
	bad := filepath.Join(t.TempDir(), "chain.key")
	if err := chain.SaveTypedKey(bad, KeyType, k.Bytes(), other.DID()); err != nil {
		t.Fatal(err)
	}
	if _, err := chain.LoadAnyKey(bad); !errors.Is(err, chain.ErrKeyFile) {
		t.Fatalf("a file whose did is another key's: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := chain.LoadAnyKey(path); !errors.Is(err, chain.ErrKeyFile) {
		t.Fatalf("a world-readable key file: %v", err)
	}
}
