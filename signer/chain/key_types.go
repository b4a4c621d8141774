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

// LoadAnyKey reads a chain key file of any registered type (an Ed25519 key as
// LoadKey does). The did the file records must be the key's.
func LoadAnyKey(path string) (Key, error) {
	kf, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	if kf.Type == "ed25519" {
		return ed25519FromFile(path, kf)
	}
	keyTypesMu.RLock()
	fromSeed := keyTypes[kf.Type]
	keyTypesMu.RUnlock()
	if fromSeed == nil {
		return nil, fmt.Errorf("%w %s: key type %q: %w", ErrKeyFile, path, kf.Type, ErrUnsupportedKeyType)
	}
	seed, err := base64.StdEncoding.DecodeString(kf.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w %s: seed is not base64: %v", ErrKeyFile, path, err)
	}
	k, err := fromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrKeyFile, path, err)
	}
	if kf.DID != k.DID() {
		return nil, fmt.Errorf("%w %s: recorded did %q does not match the key's %q (corrupt file?)", ErrKeyFile, path, abbrev(kf.DID), k.DID())
	}
	return k, nil
}
