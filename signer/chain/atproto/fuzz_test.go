package atproto

import (
	"bytes"
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
