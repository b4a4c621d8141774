package chain

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func TestSignDecodeRoundTrip(t *testing.T) {
	k := testKey(t, 0)
	prev := bytes.Repeat([]byte{0xab}, 32)
	in := Commit{
		Seq: 7, Epoch: 3, Signer: "12D3KooWpeer", Prev: prev, Time: -5,
		Ops: []Op{
			{ID: "a", Kind: Put, Path: "c/1", Value: []byte("x")},
			{ID: "b", Kind: Del, Path: "c/2"},
			{ID: "c", Kind: Put, Path: "c/3", Value: []byte{}},
		},
	}
	raw, err := Sign(k, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(raw, k.DID())
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Version, want.Chain, want.Sig = 1, k.DID(), got.Sig
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if len(got.Sig) != 64 {
		t.Fatalf("sig of %d bytes", len(got.Sig))
	}
	// Put with a nil value encodes like an empty value and decodes non-nil.
	in.Ops[2].Value = nil
	raw2, err := Sign(k, in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, raw2) {
		t.Fatal("put with nil and empty value encode differently")
	}
	// Decoded values re-encode identically.
	re, err := Encode(got)
	if err != nil || !bytes.Equal(re, raw) {
		t.Fatalf("re-encode differs (err %v)", err)
	}
	// The signature covers the encoding without sig.
	msg, _ := SigningBytes(got)
	if !k.Public().Verify(msg, got.Sig) {
		t.Fatal("sig does not cover SigningBytes")
	}
	if h := Hash(raw); hex.EncodeToString(h[:]) == hex.EncodeToString(make([]byte, 32)) {
		t.Fatal("zero hash")
	}
}

func TestSignFirstCommitHasNullPrev(t *testing.T) {
	k := testKey(t, 0)
	raw, err := Sign(k, Commit{Seq: 1, Epoch: 1, Signer: "p", Ops: testOps(1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]cbor.RawMessage
	if err := cbor.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m["prev"], []byte{0xf6}) {
		t.Fatalf("prev at seq 1 encodes as %x, want CBOR null f6", []byte(m["prev"]))
	}
	if !bytes.Equal(m["ops"][:1], []byte{0x81}) {
		t.Fatalf("ops encodes as %x, want a 1-element array", []byte(m["ops"]))
	}
}

func TestSignRefuses(t *testing.T) {
	k := testKey(t, 0)
	h := bytes.Repeat([]byte{1}, 32)
	cases := []struct {
		name string
		c    Commit
	}{
		{"seq 0", Commit{Seq: 0, Signer: "p"}},
		{"prev at seq 1", Commit{Seq: 1, Signer: "p", Prev: h}},
		{"no prev at seq 2", Commit{Seq: 2, Signer: "p"}},
		{"short prev", Commit{Seq: 2, Signer: "p", Prev: h[:31]}},
		{"bad version", Commit{Version: 2, Seq: 1, Signer: "p"}},
		{"other chain", Commit{Chain: testKey(t, 9).DID(), Seq: 1, Signer: "p"}},
		{"no signer", Commit{Seq: 1}},
		{"del with value", Commit{Seq: 1, Signer: "p", Ops: []Op{{ID: "x", Kind: Del, Path: "a/b", Value: []byte("v")}}}},
		{"bad op", Commit{Seq: 1, Signer: "p", Ops: []Op{{ID: "x", Kind: 9, Path: "a/b"}}}},
		{"empty id", Commit{Seq: 1, Signer: "p", Ops: []Op{{Kind: Put, Path: "a/b"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Sign(k, tc.c); !errors.Is(err, ErrInvalidCommit) {
				t.Fatalf("Sign = %v, want ErrInvalidCommit", err)
			}
		})
	}
}

// badKey signs with another key than the one its DID names.
type badKey struct {
	did  string
	real *Ed25519Key
}

func (b badKey) DID() string                     { return b.did }
func (b badKey) Sign(msg []byte) ([]byte, error) { return b.real.Sign(msg) }

type failKey struct{ did string }

var errHSM = errors.New("hsm unplugged")

func (f failKey) DID() string               { return f.did }
func (failKey) Sign([]byte) ([]byte, error) { return nil, errHSM }

func TestSignChecksKeyBackend(t *testing.T) {
	k, other := testKey(t, 0), testKey(t, 1)
	c := Commit{Seq: 1, Signer: "p", Ops: testOps(1, 1)}
	if _, err := Sign(badKey{did: k.DID(), real: other}, c); !errors.Is(err, ErrSignature) {
		t.Fatalf("Sign with a mismatched backend = %v, want ErrSignature", err)
	}
	if _, err := Sign(failKey{did: k.DID()}, c); !errors.Is(err, errHSM) {
		t.Fatalf("Sign with a failing backend = %v, want the backend's error", err)
	}
}

// goldenCommit is a fixed commit under the key of seed 00 01 .. 1f. Its encoding must
// never change: commits are signed, hashed and published.
func goldenCommit(t *testing.T) (Commit, *Ed25519Key) {
	k := testKey(t, 0)
	return Commit{
		Seq: 2, Epoch: 5, Signer: "12D3KooWGolden", Prev: bytes.Repeat([]byte{0x11}, 32), Time: 1_750_000_000_123,
		Ops: []Op{
			{ID: "i1", Kind: Put, Path: "app.bsky.feed.post/3k", Value: []byte("hello")},
			{ID: "i2", Kind: Del, Path: "app.bsky.feed.post/2j"},
		},
	}, k
}

const goldenHex = "a9617601636f707382a4626964626931626f70637075746376616c4568656c6c6f6470617468756170702e62736b792e666565642e706f73742f336ba3626964626932626f706364656c6470617468756170702e62736b792e666565642e706f73742f326a63736571026373696758409775a31fdf7a228345b0e8434e4e8279c7ee43840303031101e1978fc38bb73237730c19fc3f4deb6d8813f3c25450a09673b37dd90627f59745a533a697af076470726576582011111111111111111111111111111111111111111111111111111111111111116474696d651b000001977420dc7b65636861696e78386469643a6b65793a7a364d6b656852676637794a62676147665973646f41734b6442504533646a324359686f775164636a71534a677656646565706f636805667369676e65726e313244334b6f6f57476f6c64656e"
const goldenHash = "dca4054e576deede28081f1bf77ed334e3f724b73d6b4cbab1990879c57e98ae"

const goldenDID = "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd"

func TestGoldenEncoding(t *testing.T) {
	c, k := goldenCommit(t)
	raw, err := Sign(k, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(raw); got != goldenHex {
		t.Fatalf("commit encoding drifted:\n got %s\nwant %s", got, goldenHex)
	}
	h := Hash(raw)
	if got := hex.EncodeToString(h[:]); got != goldenHash {
		t.Fatalf("commit hash drifted: got %s want %s", got, goldenHash)
	}
	if k.DID() != goldenDID {
		t.Fatalf("did of the fixed seed drifted: %s", k.DID())
	}
}
