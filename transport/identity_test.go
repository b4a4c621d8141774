package transport

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A flipped bit in identity.key still unmarshals as some ed25519 key (another peer
// ID); the seed and public halves disagree, so it is refused as corrupt.
func TestIdentityFlippedBitIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreateIdentity(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{len(b) - 40, len(b) - 5} { // in the seed, in the public half
		c := append([]byte(nil), b...)
		c[at] ^= 0x01
		if err := os.WriteFile(p, c, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateIdentity(dir); !errors.Is(err, ErrCorruptIdentity) {
			t.Fatalf("flipped byte %d: %v", at, err)
		}
	}
}

func TestLooseModes(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateIdentity(dir); err != nil {
		t.Fatal(err)
	}
	if got := LooseModes(dir); len(got) != 0 {
		t.Fatalf("tight dir: %v", got)
	}
	if err := os.Chmod(filepath.Join(dir, IdentityFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := LooseModes(dir); len(got) != 2 {
		t.Fatalf("loose dir and key: %v", got)
	}
}
