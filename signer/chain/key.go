package chain

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Key is a chain signing key. The file key below implements it; a hardware or remote
// key can replace it. Sign may block (a remote signer) and may fail; it must be safe
// for concurrent use.
type Key interface {
	// DID returns the chain key's did:key; it names the verification key.
	DID() string
	// Sign returns a signature of msg that verifies under DID().
	Sign(msg []byte) ([]byte, error)
}

// Ed25519Key is an in-memory ed25519 chain key.
type Ed25519Key struct {
	priv ed25519.PrivateKey
	did  string
}

var _ Key = (*Ed25519Key)(nil)

// GenerateKey returns a new ed25519 chain key read from r (crypto/rand if nil).
func GenerateKey(r io.Reader) (*Ed25519Key, error) {
	if r == nil {
		r = rand.Reader
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(r, seed); err != nil {
		return nil, fmt.Errorf("generate chain key: %w", err)
	}
	return NewEd25519KeyFromSeed(seed)
}

// NewEd25519KeyFromSeed returns the chain key of a 32-byte ed25519 seed.
func NewEd25519KeyFromSeed(seed []byte) (*Ed25519Key, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("ed25519 seed of %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	return &Ed25519Key{priv: priv, did: FormatEd25519DID(priv.Public().(ed25519.PublicKey))}, nil
}

// DID returns the key's did:key.
func (k *Ed25519Key) DID() string { return k.did }

// Sign signs msg with ed25519.
func (k *Ed25519Key) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(k.priv, msg), nil }

// Public returns the verification key.
func (k *Ed25519Key) Public() PublicKey {
	return Ed25519PublicKey(k.priv.Public().(ed25519.PublicKey))
}

// keyFile is the on-disk format of a chain key: a small JSON document, so that an
// operator can tell what the file is and which identity it holds.
//
//	{"format":"baton-chain-key","version":1,"type":"ed25519","seed":"<base64 32 bytes>","did":"did:key:z6Mk..."}
type keyFile struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Type    string `json:"type"`
	Seed    string `json:"seed"`
	DID     string `json:"did"`
}

const (
	keyFileFormat  = "baton-chain-key"
	keyFileVersion = 1
	maxKeyFileSize = 4096
)

// SaveKey writes k to path with mode 0600. It refuses to overwrite an existing file
// (ErrKeyExists): the chain key is the identity being protected. The file appears
// atomically, complete or not at all.
func SaveKey(path string, k *Ed25519Key) error {
	return saveKeyFile(path, "ed25519", k.priv.Seed(), k.did)
}

func saveKeyFile(path, typ string, seed []byte, did string) error {
	doc, err := json.MarshalIndent(keyFile{
		Format:  keyFileFormat,
		Version: keyFileVersion,
		Type:    typ,
		Seed:    base64.StdEncoding.EncodeToString(seed),
		DID:     did,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("save chain key: %w", err)
	}
	doc = append(doc, '\n')
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("save chain key %s: %w", path, ErrKeyExists)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".chainkey-*.tmp")
	if err != nil {
		return fmt.Errorf("save chain key: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the link below, only the temporary name goes
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save chain key: %w", err)
	}
	if _, err := tmp.Write(doc); err != nil {
		tmp.Close()
		return fmt.Errorf("save chain key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save chain key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save chain key: %w", err)
	}
	// Link, not rename: link fails if path appeared meanwhile, so we never clobber.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("save chain key %s: %w", path, ErrKeyExists)
		}
		return fmt.Errorf("save chain key: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // make the new name durable; best effort on filesystems without dir fsync
		d.Close()
	}
	return nil
}

// LoadKey reads a chain key written by SaveKey. Errors wrap ErrKeyFile and say what is
// wrong (too open permissions, not a key file, wrong seed size, did mismatch).
func LoadKey(path string) (*Ed25519Key, error) {
	kf, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	if kf.Type != "ed25519" {
		return nil, fmt.Errorf("%w %s: key type %q: %w", ErrKeyFile, path, kf.Type, ErrUnsupportedKeyType)
	}
	return ed25519FromFile(path, kf)
}

// readKeyFile reads and checks a chain key file (permissions, size, format, version).
func readKeyFile(path string) (*keyFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load chain key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load chain key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w %s: not a regular file", ErrKeyFile, path)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w %s: permissions %#o are too open, want 0600 (chmod 600 %s)", ErrKeyFile, path, st.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("load chain key: %w", err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("%w %s: larger than %d bytes, not a chain key file", ErrKeyFile, path, maxKeyFileSize)
	}
	var kf keyFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kf); err != nil {
		return nil, fmt.Errorf("%w %s: not a JSON chain key file: %v", ErrKeyFile, path, err)
	}
	if kf.Format != keyFileFormat {
		return nil, fmt.Errorf("%w %s: format %q, want %q", ErrKeyFile, path, kf.Format, keyFileFormat)
	}
	if kf.Version != keyFileVersion {
		return nil, fmt.Errorf("%w %s: version %d, want %d", ErrKeyFile, path, kf.Version, keyFileVersion)
	}
	return &kf, nil
}

func ed25519FromFile(path string, kf *keyFile) (*Ed25519Key, error) {
	seed, err := base64.StdEncoding.DecodeString(kf.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w %s: seed is not base64: %v", ErrKeyFile, path, err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w %s: seed of %d bytes, want %d", ErrKeyFile, path, len(seed), ed25519.SeedSize)
	}
	k, err := NewEd25519KeyFromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrKeyFile, path, err)
	}
	if kf.DID != k.did {
		return nil, fmt.Errorf("%w %s: recorded did %q does not match the seed's %q (corrupt file?)", ErrKeyFile, path, abbrev(kf.DID), k.did)
	}
	return k, nil
}
