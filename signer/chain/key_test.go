package chain

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "chain.key")
	k, err := GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveKey(path, k); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %#o, want 0600", st.Mode().Perm())
	}
	got, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.DID() != k.DID() || !bytes.Equal(got.priv, k.priv) {
		t.Fatal("loaded key differs from saved key")
	}
	// No temporary files left behind.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want only the key file", len(ents))
	}
	// Never overwritten.
	k2, _ := GenerateKey(nil)
	if err := SaveKey(path, k2); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("SaveKey over an existing file = %v, want ErrKeyExists", err)
	}
	if again, _ := LoadKey(path); again.DID() != k.DID() {
		t.Fatal("existing key was overwritten")
	}
}

func TestLoadKeyErrors(t *testing.T) {
	good := func(t *testing.T) []byte {
		path := filepath.Join(t.TempDir(), "k")
		if err := SaveKey(path, testKey(t, 1)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}(t)
	other := testKey(t, 2)
	cases := []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    string
	}{
		{"empty", nil, 0o600, "not a JSON"},
		{"garbage", []byte("\x00\x01garbage"), 0o600, "not a JSON"},
		{"truncated", good[:len(good)/2], 0o600, "not a JSON"},
		{"wrong format", bytes.Replace(good, []byte("baton-chain-key"), []byte("something-else"), 1), 0o600, "format"},
		{"wrong type", bytes.Replace(good, []byte(`"ed25519"`), []byte(`"p256"`), 1), 0o600, "key type"},
		{"short seed", bytes.Replace(good, []byte(`"seed": "`), []byte(`"seed": "AAAA`), 1), 0o600, "seed"},
		{"seed not base64", bytes.Replace(good, []byte(`"seed": "`), []byte(`"seed": "!!`), 1), 0o600, "base64"},
		{"did mismatch", bytes.Replace(good, []byte(testKey(t, 1).DID()), []byte(other.DID()), 1), 0o600, "does not match"},
		{"unknown field", bytes.Replace(good, []byte(`{`), []byte(`{"extra": 1,`), 1), 0o600, "unknown field"},
		{"too open", good, 0o644, "too open"},
		{"huge", bytes.Repeat([]byte(" "), maxKeyFileSize+10), 0o600, "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(path, tc.content, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil { // umask may have narrowed it
				t.Fatal(err)
			}
			_, err := LoadKey(path)
			if !errors.Is(err, ErrKeyFile) {
				t.Fatalf("LoadKey = %v, want ErrKeyFile", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadKey error %q does not mention %q", err, tc.want)
			}
		})
	}
	if _, err := LoadKey(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKey(missing) = %v, want ErrNotExist", err)
	}
}

func TestNewKeyFromSeedSize(t *testing.T) {
	if _, err := NewEd25519KeyFromSeed(make([]byte, 31)); err == nil {
		t.Fatal("31-byte seed accepted")
	}
}
