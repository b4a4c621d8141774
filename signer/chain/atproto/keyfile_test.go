package atproto

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

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

// TestKeyFileK256: a K-256 chain key round-trips through the key file (type k256) to
// the same did:key (zQ3s...), is told from a P-256 one by its did, and signs low-S
// (s <= n/2: atproto refuses the other half, and indigo's strict verification with
// it); its raw bytes read as P-256 give another key.
func TestKeyFileK256(t *testing.T) {
	k, err := GenerateKeyOf(KeyTypeK256)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.DID(), "did:key:zQ3s") || KeyTypeOfDID(k.DID()) != KeyTypeK256 || IsP256DID(k.DID()) || !IsKeyDID(k.DID()) {
		t.Fatalf("K-256 did %s: type %q", k.DID(), KeyTypeOfDID(k.DID()))
	}
	path := filepath.Join(t.TempDir(), "chain.key")
	if err := SaveKey(path, k); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(raw), `"type": "k256"`) {
		t.Fatalf("key file: %s %v", raw, err)
	}
	got, err := chain.LoadAnyKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.DID() != k.DID() || got.(*Key).Type() != KeyTypeK256 {
		t.Fatalf("loaded %s, saved %s", got.DID(), k.DID())
	}
	pub, err := atcrypto.ParsePublicDIDKey(k.DID())
	if err != nil {
		t.Fatal(err)
	}
	halfN := new(big.Int).Rsh(secp256k1N, 1)
	for i := range 64 {
		msg := []byte{byte(i)}
		sig, err := got.Sign(msg)
		if err != nil || len(sig) != 64 {
			t.Fatalf("sign: %d bytes, %v", len(sig), err)
		}
		if new(big.Int).SetBytes(sig[32:]).Cmp(halfN) > 0 {
			t.Fatalf("signature %d is high-S", i)
		}
		if err := pub.HashAndVerify(msg, sig); err != nil {
			t.Fatalf("indigo refuses signature %d: %v", i, err)
		}
	}
	p, err := ParseKeyOf(KeyTypeP256, k.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if p.DID() == k.DID() || KeyTypeOfDID(p.DID()) != KeyTypeP256 {
		t.Fatalf("the same bytes as P-256: %s", p.DID())
	}
	if _, err := GenerateKeyOf("ed25519"); !errors.Is(err, chain.ErrUnsupportedKeyType) {
		t.Fatalf("an ed25519 atproto key: %v", err)
	}
}

// secp256k1N is the order of secp256k1's group.
var secp256k1N, _ = new(big.Int).SetString("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141", 16)
