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
