package chain

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/multiformats/go-multibase"
)

// Multicodec codes of the public key types a did:key may name. Only ed25519 is
// supported today; the others are recognised so that the error says what is missing.
const (
	CodecEd25519Pub   uint64 = 0xed
	CodecSecp256k1Pub uint64 = 0xe7
	CodecP256Pub      uint64 = 0x1200
)

const didKeyPrefix = "did:key:"

// PublicKey is the verification side of a chain key, named by its did:key.
type PublicKey interface {
	// DID returns the key's canonical did:key string.
	DID() string
	// Verify reports whether sig is a valid signature of msg under this key.
	Verify(msg, sig []byte) bool
}

// Ed25519PublicKey is an ed25519 chain public key.
type Ed25519PublicKey ed25519.PublicKey

var _ PublicKey = Ed25519PublicKey(nil)

// DID returns "did:key:z" + base58btc(0xed 0x01 || key).
func (k Ed25519PublicKey) DID() string { return FormatEd25519DID(ed25519.PublicKey(k)) }

// Verify checks an ed25519 signature.
func (k Ed25519PublicKey) Verify(msg, sig []byte) bool {
	if len(k) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(k), msg, sig)
}

// FormatEd25519DID returns the did:key of an ed25519 public key. It panics if pub is not
// 32 bytes (a programming error).
func FormatEd25519DID(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		panic(fmt.Sprintf("chain: ed25519 public key of %d bytes", len(pub)))
	}
	buf := make([]byte, 0, 2+ed25519.PublicKeySize)
	buf = binary.AppendUvarint(buf, CodecEd25519Pub) // 0xed 0x01
	buf = append(buf, pub...)
	s, err := multibase.Encode(multibase.Base58BTC, buf)
	if err != nil {
		panic("chain: base58btc encode: " + err.Error()) // cannot happen for a known base
	}
	return didKeyPrefix + s
}

// ParseDID parses a did:key and returns its public key. Only the canonical form is
// accepted (base58btc, minimal multicodec varint, exact key length), so the returned
// key's DID() equals did.
func ParseDID(did string) (PublicKey, error) {
	rest, ok := strings.CutPrefix(did, didKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: %q does not start with %q", ErrInvalidDID, abbrev(did), didKeyPrefix)
	}
	if !strings.HasPrefix(rest, "z") {
		return nil, fmt.Errorf("%w: %q is not base58btc (multibase prefix 'z')", ErrInvalidDID, abbrev(did))
	}
	enc, data, err := multibase.Decode(rest)
	if err != nil || enc != multibase.Base58BTC {
		return nil, fmt.Errorf("%w: %q: bad base58btc: %v", ErrInvalidDID, abbrev(did), err)
	}
	codec, n := binary.Uvarint(data)
	if n <= 0 {
		return nil, fmt.Errorf("%w: %q: bad multicodec varint", ErrInvalidDID, abbrev(did))
	}
	key := data[n:]
	switch codec {
	case CodecEd25519Pub:
		if len(key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: %q: ed25519 key of %d bytes, want %d", ErrInvalidDID, abbrev(did), len(key), ed25519.PublicKeySize)
		}
		pk := Ed25519PublicKey(append([]byte(nil), key...))
		if pk.DID() != did { // non-minimal varint or other non-canonical spelling
			return nil, fmt.Errorf("%w: %q is not in canonical form", ErrInvalidDID, abbrev(did))
		}
		return pk, nil
	case CodecP256Pub:
		return nil, fmt.Errorf("%w: P-256 (multicodec 0x1200) is not supported yet", ErrUnsupportedKeyType)
	case CodecSecp256k1Pub:
		return nil, fmt.Errorf("%w: secp256k1 (multicodec 0xe7) is not supported yet", ErrUnsupportedKeyType)
	default:
		return nil, fmt.Errorf("%w: multicodec 0x%x", ErrUnsupportedKeyType, codec)
	}
}

// abbrev keeps error messages short when given garbage.
func abbrev(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
