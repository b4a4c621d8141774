package chain

import (
	"bytes"
	"errors"
	"testing"
)

// TestBatonFormatIsToday: the format seam changes nothing for version 1: the same
// bytes, hash and verification as the package functions, and an old genesis (version 1)
// names it.
func TestBatonFormatIsToday(t *testing.T) {
	k, err := NewEd25519KeyFromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	f, err := FormatOf(1)
	if err != nil || f != Baton || f.Name() != "baton" || f.KeyType() != "ed25519" {
		t.Fatalf("FormatOf(1) = %v, %v", f, err)
	}
	c := Commit{Seq: 1, Epoch: 1, Signer: "peer", Ops: []Op{{ID: "a", Kind: Put, Path: "app.x/1", Value: []byte("v")}}, Time: 5}
	raw, err := f.Sign(k, c)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Sign(k, c) // ed25519 is deterministic
	if !bytes.Equal(raw, want) || f.Hash(raw) != Hash(raw) {
		t.Fatal("format bytes or hash differ from the package's")
	}
	got, err := f.VerifySelf(raw)
	if err != nil || got.Seq != 1 || got.Chain != k.DID() {
		t.Fatalf("VerifySelf = %+v, %v", got, err)
	}
	if _, err := FormatOf(2); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("FormatOf(2) = %v", err)
	}
	if f, err := FormatNamed("baton"); err != nil || f != Baton {
		t.Fatalf("FormatNamed = %v, %v", f, err)
	}
}

// VerifyChainOf and VerifyOf on baton's format give what VerifyChain and Verify give:
// the same verdicts, seqs and reasons.
func TestFormatChainChecks(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	raws := buildChain(t, k, 1, 1, 2, 2)
	if err := VerifyChainOf(Baton, raws, k.DID()); err != nil {
		t.Fatalf("good chain: %v", err)
	}
	bad := append([][]byte(nil), raws...)
	bad[1], bad[2] = raws[2], raws[1] // seq 3 where seq 2 belongs
	want := VerifyChain(bad, k.DID()).(*VerifyError)
	got, ok := VerifyChainOf(Baton, bad, k.DID()).(*VerifyError)
	if !ok || got.Reason != want.Reason || got.Seq != want.Seq || got.Index != want.Index {
		t.Fatalf("VerifyChainOf = %v, VerifyChain = %v", got, want)
	}
	if c, err := VerifyOf(Baton, raws[0], k.DID()); err != nil || c.Seq != 1 {
		t.Fatalf("VerifyOf = %+v, %v", c, err)
	}
	var ve *VerifyError
	if _, err := VerifyOf(Baton, raws[0], other.DID()); !errors.As(err, &ve) || ve.Reason != ReasonWrongChain {
		t.Fatalf("VerifyOf another chain = %v", err)
	}
	type signOnly struct{ Format }
	if _, err := NewStepper(signOnly{Baton}, k.DID()); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("NewStepper of a format without chains = %v", err)
	}
}
