package atproto

import (
	"fmt"
	"strings"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/batonhq/baton/signer/chain"
)

// KeyType is the chain key type of this format.
const KeyType = "p256"

// Key is a P-256 chain key: the repository DID's #atproto signing key. It implements
// chain.Key: DID is its did:key, Sign a low-S ECDSA signature (64 bytes r||s) of
// SHA-256(msg). Signatures are randomized: two signatures of one commit differ, so a
// commit is signed once and its bytes travel in the log.
type Key struct {
	priv *atcrypto.PrivateKeyP256
	did  string
}

var _ chain.Key = (*Key)(nil)

// GenerateKey returns a new P-256 chain key.
func GenerateKey() (*Key, error) {
	priv, err := atcrypto.GeneratePrivateKeyP256()
	if err != nil {
		return nil, fmt.Errorf("generate atproto chain key: %w", err)
	}
	return keyOf(priv)
}

// ParseKey reads a P-256 private key from its 32 raw bytes (what a PDS exports as the
// account's signing key).
func ParseKey(b []byte) (*Key, error) {
	priv, err := atcrypto.ParsePrivateBytesP256(b)
	if err != nil {
		return nil, fmt.Errorf("atproto chain key: %w", err)
	}
	return keyOf(priv)
}

func keyOf(priv *atcrypto.PrivateKeyP256) (*Key, error) {
	pub, err := priv.PublicKey()
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv, did: pub.DIDKey()}, nil
}

// DID returns the key's did:key (zDn... for P-256).
func (k *Key) DID() string { return k.did }

// Sign returns a low-S P-256 signature of SHA-256(msg).
func (k *Key) Sign(msg []byte) ([]byte, error) { return k.priv.HashAndSign(msg) }

// Bytes returns the private key's raw bytes (for a key file; keep them secret).
func (k *Key) Bytes() []byte { return k.priv.Bytes() }

// parsePub parses a P-256 or K-256 did:key. Ed25519 is refused: atproto does not
// accept it for repository signing.
func parsePub(did string) (atcrypto.PublicKey, error) {
	if !strings.HasPrefix(did, "did:key:z") {
		return nil, fmt.Errorf("%w: %q is not a did:key", chain.ErrInvalidDID, did)
	}
	pub, err := atcrypto.ParsePublicDIDKey(did)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", chain.ErrUnsupportedKeyType, err)
	}
	return pub, nil
}

// IsP256DID reports whether did is a P-256 did:key in canonical form: a chain key
// this format signs with.
func IsP256DID(did string) bool {
	pub, err := parsePub(did)
	if err != nil {
		return false
	}
	_, ok := pub.(*atcrypto.PublicKeyP256)
	return ok && pub.DIDKey() == did
}

func init() {
	chain.RegisterKeyType(KeyType, func(seed []byte) (chain.Key, error) { return ParseKey(seed) })
}

// SaveKey writes k to a chain key file (type "p256", mode 0600, never over an
// existing file): chain.LoadAnyKey reads it back.
func SaveKey(path string, k *Key) error { return chain.SaveTypedKey(path, KeyType, k.Bytes(), k.DID()) }
