package chain

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"github.com/multiformats/go-multibase"
)

func TestDIDRoundTrip(t *testing.T) {
	k := testKey(t, 0)
	did := k.DID()
	// Every ed25519 did:key starts with z6Mk (0xed 0x01 in base58btc).
	if !strings.HasPrefix(did, "did:key:z6Mk") {
		t.Fatalf("did %q lacks the ed25519 prefix did:key:z6Mk", did)
	}
	pub, err := ParseDID(did)
	if err != nil {
		t.Fatal(err)
	}
	if pub.DID() != did {
		t.Fatalf("parsed DID %q != %q", pub.DID(), did)
	}
	want := k.priv.Public().(ed25519.PublicKey)
	if got := ed25519.PublicKey(pub.(Ed25519PublicKey)); !got.Equal(want) {
		t.Fatalf("parsed key %x, want %x", got, want)
	}
	msg := []byte("hello")
	sig, _ := k.Sign(msg)
	if !pub.Verify(msg, sig) {
		t.Fatal("signature does not verify under parsed key")
	}
	if pub.Verify([]byte("hellO"), sig) || pub.Verify(msg, sig[:63]) {
		t.Fatal("verify accepted a wrong message or short signature")
	}
}

// TestDIDKnownVector checks against the did:key spec's ed25519 test vector
// (w3c-ccg/did-method-key, "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp").
func TestDIDKnownVector(t *testing.T) {
	const did = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
	pub, err := ParseDID(did)
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.(Ed25519PublicKey)) != 32 || pub.DID() != did {
		t.Fatalf("round trip of the spec vector failed: %q", pub.DID())
	}
}

func TestParseDIDErrors(t *testing.T) {
	pub := testKey(t, 0).priv.Public().(ed25519.PublicKey)
	enc := func(b []byte) string {
		s, err := multibase.Encode(multibase.Base58BTC, b)
		if err != nil {
			t.Fatal(err)
		}
		return "did:key:" + s
	}
	b32, _ := multibase.Encode(multibase.Base32, append([]byte{0xed, 0x01}, pub...))
	cases := []struct {
		name, did string
		want      error
	}{
		{"empty", "", ErrInvalidDID},
		{"not did:key", "did:web:example.com", ErrInvalidDID},
		{"not base58btc", "did:key:" + b32, ErrInvalidDID},
		{"bad base58 char", "did:key:z6Mk0OIl", ErrInvalidDID},
		{"short key", enc(append([]byte{0xed, 0x01}, pub[:31]...)), ErrInvalidDID},
		{"long key", enc(append(append([]byte{0xed, 0x01}, pub...), 0)), ErrInvalidDID},
		{"non-minimal varint", enc(append([]byte{0xed, 0x81, 0x00}, pub...)), ErrInvalidDID},
		{"no varint", "did:key:z", ErrInvalidDID},
		{"p256", enc(append([]byte{0x80, 0x24}, make([]byte, 33)...)), ErrUnsupportedKeyType},
		{"secp256k1", enc(append([]byte{0xe7, 0x01}, make([]byte, 33)...)), ErrUnsupportedKeyType},
		{"unknown codec", enc(append([]byte{0x55}, pub...)), ErrUnsupportedKeyType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDID(tc.did)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseDID(%q) = %v, want %v", tc.did, err, tc.want)
			}
		})
	}
}
