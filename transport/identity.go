package transport

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// IdentityFile is the name of the device's libp2p key inside the data dir.
const IdentityFile = "identity.key"

// LoadOrCreateIdentity returns the ed25519 key stored in dir/identity.key, creating
// it (mode 0600) on first use. A file that exists but does not decode to an ed25519
// key is ErrCorruptIdentity: it is never replaced, because that would change the
// device's peer ID and thus its Raft server ID.
func LoadOrCreateIdentity(dir string) (crypto.PrivKey, error) {
	path := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrCorruptIdentity, path, err)
		}
		if k.Type() != crypto.Ed25519 {
			return nil, fmt.Errorf("%w %s: key type %v, want ed25519", ErrCorruptIdentity, path, k.Type())
		}
		// An ed25519 key is stored as seed and public key: a flipped bit in either
		// still unmarshals, as another key (another peer ID, "not a member"). The two
		// halves must agree.
		raw, err := k.Raw()
		if err != nil || len(raw) != ed25519.PrivateKeySize ||
			!bytes.Equal(ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])[ed25519.SeedSize:], raw[ed25519.SeedSize:]) {
			return nil, fmt.Errorf("%w %s: the key's seed and public half disagree (a corrupt file; restore it from a backup: the device's peer ID depends on it)", ErrCorruptIdentity, path)
		}
		return k, nil
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("read identity: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate identity: %w", err)
	}
	b, err = crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal identity: %w", err)
	}
	if err := writeFileAtomic(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("write identity: %w", err)
	}
	return k, nil
}

// LooseModes lists the files and directories of a data dir that others than its owner
// can read (identity.key, network.key, chain.key, the dir itself): the node warns
// about them at start. A missing file is not listed.
func LooseModes(dir string) []string {
	var out []string
	for _, p := range []string{dir, filepath.Join(dir, IdentityFile), filepath.Join(dir, "network.key"), filepath.Join(dir, "chain.key")} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.Mode().Perm()&0o077 != 0 {
			out = append(out, fmt.Sprintf("%s (mode %#o)", p, fi.Mode().Perm()))
		}
	}
	return out
}

// writeFileAtomic writes data to a temporary file in the same directory, syncs it and
// renames it over path, so a crash leaves either the old or the new content.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
