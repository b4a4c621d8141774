package atproto

import (
	"fmt"
	"strings"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/batonhq/baton/signer/chain"
)

// Chain key types of this format: the two curves atproto signs repositories with.
const (
	// KeyType is P-256 (NIST P-256, secp256r1, ES256): did:key zDn..., what
	// GenerateKey makes. The format's KeyType.
	KeyType = KeyTypeP256
	// KeyTypeP256 is the key file type of a P-256 chain key.
	KeyTypeP256 = "p256"
	// KeyTypeK256 is the key file type of a K-256 chain key (secp256k1, ES256K):
	// did:key zQ3s..., what the reference PDS gives each account.
	KeyTypeK256 = "k256"
)

// Key is a P-256 or K-256 chain key: the repository DID's #atproto signing key. It
// implements chain.Key: DID is its did:key, Sign a low-S ECDSA signature (64 bytes
// r||s) of SHA-256(msg). Signatures are randomized: two signatures of one commit
// differ, so a commit is signed once and its bytes travel in the log.
type Key struct {
	priv atcrypto.PrivateKeyExportable
	typ  string
	did  string
}

var _ chain.Key = (*Key)(nil)

// GenerateKey returns a new P-256 chain key.
func GenerateKey() (*Key, error) { return GenerateKeyOf(KeyTypeP256) }

// GenerateKeyOf returns a new chain key of type typ (KeyTypeP256 or KeyTypeK256).
func GenerateKeyOf(typ string) (*Key, error) {
	var priv atcrypto.PrivateKeyExportable
	var err error
	switch typ {
	case KeyTypeP256:
		priv, err = atcrypto.GeneratePrivateKeyP256()
	case KeyTypeK256:
		priv, err = atcrypto.GeneratePrivateKeyK256()
	default:
		return nil, fmt.Errorf("%w: atproto key type %q (want %s or %s)", chain.ErrUnsupportedKeyType, typ, KeyTypeP256, KeyTypeK256)
	}
	if err != nil {
		return nil, fmt.Errorf("generate atproto chain key: %w", err)
	}
	return keyOf(priv, typ)
}

// ParseKey reads a P-256 private key from its 32 raw bytes.
func ParseKey(b []byte) (*Key, error) { return ParseKeyOf(KeyTypeP256, b) }

// ParseKeyOf reads a private key of type typ from its 32 raw bytes (the scalar,
// big-endian: what a PDS keeps as an account's signing key).
func ParseKeyOf(typ string, b []byte) (*Key, error) {
	var priv atcrypto.PrivateKeyExportable
	var err error
	switch typ {
	case KeyTypeP256:
		priv, err = atcrypto.ParsePrivateBytesP256(b)
	case KeyTypeK256:
		priv, err = atcrypto.ParsePrivateBytesK256(b)
	default:
		return nil, fmt.Errorf("%w: atproto key type %q (want %s or %s)", chain.ErrUnsupportedKeyType, typ, KeyTypeP256, KeyTypeK256)
	}
	if err != nil {
		return nil, fmt.Errorf("atproto chain key: %w", err)
	}
	return keyOf(priv, typ)
}

func keyOf(priv atcrypto.PrivateKeyExportable, typ string) (*Key, error) {
	pub, err := priv.PublicKey()
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv, typ: typ, did: pub.DIDKey()}, nil
}

// DID returns the key's did:key (zDn... for P-256, zQ3s... for K-256).
func (k *Key) DID() string { return k.did }

// Type returns the key's type: KeyTypeP256 or KeyTypeK256.
func (k *Key) Type() string { return k.typ }

// Sign returns a low-S signature of SHA-256(msg) (atcrypto's HashAndSign: low-S on
// both curves, as atproto requires).
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

// KeyTypeOfDID returns the key type of a P-256 or K-256 did:key in canonical form (a
// chain key this format signs with), "" for anything else.
func KeyTypeOfDID(did string) string {
	pub, err := parsePub(did)
	if err != nil || pub.DIDKey() != did {
		return ""
	}
	switch pub.(type) {
	case *atcrypto.PublicKeyP256:
		return KeyTypeP256
	case *atcrypto.PublicKeyK256:
		return KeyTypeK256
	}
	return ""
}

// IsP256DID reports whether did is a P-256 did:key in canonical form.
func IsP256DID(did string) bool { return KeyTypeOfDID(did) == KeyTypeP256 }

// IsKeyDID reports whether did is a chain key this format signs with: a P-256 or
// K-256 did:key in canonical form.
func IsKeyDID(did string) bool { return KeyTypeOfDID(did) != "" }

func init() {
	for _, typ := range []string{KeyTypeP256, KeyTypeK256} {
		chain.RegisterKeyType(typ, func(seed []byte) (chain.Key, error) { return ParseKeyOf(typ, seed) })
	}
}

// SaveKey writes k to a chain key file (type "p256" or "k256", the private key's 32
// raw bytes, mode 0600, never over an existing file): chain.LoadAnyKey reads it back.
func SaveKey(path string, k *Key) error { return chain.SaveTypedKey(path, k.typ, k.Bytes(), k.DID()) }
