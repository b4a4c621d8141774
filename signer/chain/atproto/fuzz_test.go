package atproto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/batonhq/baton/signer/chain"
)

// FuzzDecodeEnvelope: the decoders the apply runs never panic, and what they accept
// re-encodes to the same bytes (one encoding per commit).
func FuzzDecodeEnvelope(f *testing.F) {
	k, err := GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	r := newReplica()
	raw, err := Propose(k, r.bs, r.head, chain.Commit{Seq: 1, Epoch: 1, Signer: "p", Time: 1,
		Ops: []chain.Op{{ID: "a", Kind: chain.Put, Path: "app.bsky.feed.post/3l3qo2vutsw2b", Value: record(f, "x")}}}, testDID, "3l3qo2vutsw2b")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add(record(f, "y"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := DecodeEnvelope(b); err == nil {
			ops := make([][]byte, len(e.OpPrev))
			copy(ops, e.OpPrev)
			re, err := encodeEnvelope(e.Commit, e.PrevData, ops, e.Block)
			if err != nil || !bytes.Equal(re, b) {
				t.Fatalf("accepted bytes do not re-encode: %v", err)
			}
			_, _ = Apply(memBlocks{}, Head{}, e)
		}
		if CheckRecord(b) == nil {
			if _, err := DecodeRepoCommit(b); err == nil {
				t.Log("a record that is also a commit block")
			}
		}
		_, _ = DecodeHead(b)
	})
}

// FuzzImportKey: ImportKey never panics; what it accepts is a key of the type it
// says, that saves and signs, and reading its raw bytes back with that type gives the
// same did:key; what it refuses is ErrKeyImport.
func FuzzImportKey(f *testing.F) {
	k, _ := GenerateKeyOf(KeyTypeK256)
	p, _ := GenerateKeyOf(KeyTypeP256)
	for _, key := range []*Key{k, p} {
		hx := hex.EncodeToString(key.Bytes())
		f.Add([]byte(hx), key.Type())
		f.Add(key.Bytes(), key.Type())
		f.Add([]byte(key.priv.(interface{ Multibase() string }).Multibase()), "")
		f.Add([]byte("PDS_REPO_SIGNING_KEY_K256_PRIVATE_KEY_HEX="+hx+"\n"), "")
		f.Add([]byte(key.DID()), "")
	}
	f.Fuzz(func(t *testing.T, data []byte, typ string) {
		got, err := ImportKey(data, typ)
		if err != nil {
			if !errors.Is(err, ErrKeyImport) {
				t.Fatalf("refused without ErrKeyImport: %v", err)
			}
			return
		}
		if KeyTypeOfDID(got.DID()) != got.Type() {
			t.Fatalf("key %s of type %s", got.DID(), got.Type())
		}
		again, err := ParseKeyOf(got.Type(), got.Bytes())
		if err != nil || again.DID() != got.DID() {
			t.Fatalf("raw bytes read back: %v", err)
		}
		pub, err := parsePub(got.DID())
		if err != nil {
			t.Fatal(err)
		}
		sig, err := got.Sign(data)
		if err != nil || pub.HashAndVerify(data, sig) != nil {
			t.Fatalf("sign: %v", err)
		}
	})
}
