package chain

import (
	"encoding/base64"
	"fmt"
	"sync"
)

// Chain keys of other types than Ed25519 (a P-256 key for an atproto chain) live in
// the same key file (type and seed: the private key's raw bytes); the package that
// knows the type registers how to read it.

var (
	keyTypesMu sync.RWMutex
	keyTypes   = map[string]func(seed []byte) (Key, error){}
)

// RegisterKeyType makes LoadAnyKey read key files of type typ with fromSeed.
func RegisterKeyType(typ string, fromSeed func(seed []byte) (Key, error)) {
	keyTypesMu.Lock()
	defer keyTypesMu.Unlock()
	keyTypes[typ] = fromSeed
}

// SaveTypedKey writes a chain key of type typ (its raw private bytes, its did:key) as
// SaveKey does: mode 0600, never over an existing file.
func SaveTypedKey(path, typ string, seed []byte, did string) error {
	return saveKeyFile(path, typ, seed, did)
}

// KnownKeyType reports whether this build reads chain keys of type typ ("ed25519" or a
// registered type).
func KnownKeyType(typ string) bool {
	if typ == "ed25519" {
		return true
	}
	keyTypesMu.RLock()
	defer keyTypesMu.RUnlock()
	return keyTypes[typ] != nil
}

// KeyFromSeed returns the chain key of type typ whose private bytes (the key file's
// seed) are seed: an *Ed25519Key for "ed25519", else the registered type's key.
func KeyFromSeed(typ string, seed []byte) (Key, error) {
	if typ == "ed25519" {
		return NewEd25519KeyFromSeed(seed)
	}
	keyTypesMu.RLock()
	fromSeed := keyTypes[typ]
	keyTypesMu.RUnlock()
	if fromSeed == nil {
		return nil, fmt.Errorf("key type %q: %w", typ, ErrUnsupportedKeyType)
	}
	return fromSeed(seed)
}

// ReadKeyFileSeed reads a chain key file as LoadAnyKey does and also returns its type
// and its seed (the private key's bytes: what an invite with the chain key carries).
func ReadKeyFileSeed(path string) (k Key, typ string, seed []byte, err error) {
	kf, err := readKeyFile(path)
	if err != nil {
		return nil, "", nil, err
	}
	if k, seed, err = keyOfFile(path, kf); err != nil {
		return nil, "", nil, err
	}
	return k, kf.Type, seed, nil
}

// LoadAnyKey reads a chain key file of any registered type (an Ed25519 key as
// LoadKey does). The did the file records must be the key's.
func LoadAnyKey(path string) (Key, error) {
	kf, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	k, _, err := keyOfFile(path, kf)
	return k, err
}

func keyOfFile(path string, kf *keyFile) (Key, []byte, error) {
	if !KnownKeyType(kf.Type) {
		return nil, nil, fmt.Errorf("%w %s: key type %q: %w", ErrKeyFile, path, kf.Type, ErrUnsupportedKeyType)
	}
	seed, err := base64.StdEncoding.DecodeString(kf.Seed)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %s: seed is not base64: %v", ErrKeyFile, path, err)
	}
	if kf.Type == "ed25519" {
		k, err := ed25519FromFile(path, kf)
		if err != nil {
			return nil, nil, err // not a typed nil in the interface
		}
		return k, seed, nil
	}
	k, err := KeyFromSeed(kf.Type, seed)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %s: %v", ErrKeyFile, path, err)
	}
	if kf.DID != k.DID() {
		return nil, nil, fmt.Errorf("%w %s: recorded did %q does not match the key's %q (corrupt file?)", ErrKeyFile, path, abbrev(kf.DID), k.DID())
	}
	return k, seed, nil
}
