package atproto

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/batonhq/baton/signer/chain"
)

// memBlocks is a map block store for tests.
type memBlocks map[string][]byte

func (m memBlocks) Get(c []byte) ([]byte, error) { return m[string(c)], nil }

func (m memBlocks) put(bl []Block) {
	for _, b := range bl {
		m[string(b.CID)] = b.Data
	}
}

// replica is one device's copy of the chain: its repository and the fence head.
type replica struct {
	trees *TreeCache // nil: load the tree from the blocks every time
	bs    memBlocks
	head  Head
	seq   uint64
	hash  [chain.HashSize]byte
}

func newReplica() *replica { return &replica{bs: memBlocks{}} }

// apply does what the log's apply does with an envelope on an atproto chain: verify,
// the fence (seq, prev), then the repository step.
func (r *replica) apply(raw []byte) (Step, error) {
	e, err := VerifyEnvelope(raw)
	if err != nil {
		return Step{}, err
	}
	if e.Commit.Seq != r.seq+1 {
		return Step{}, fmt.Errorf("bad_seq")
	}
	if r.seq > 0 && !bytes.Equal(e.Commit.Prev, r.hash[:]) {
		return Step{}, fmt.Errorf("bad_prev")
	}
	st, err := r.trees.Apply(r.bs, r.head, e)
	if err != nil {
		return st, err
	}
	r.bs.put(st.Blocks)
	r.head, r.seq, r.hash = st.Head, e.Commit.Seq, Hash(raw)
	return st, nil
}

// record returns a DAG-CBOR post record.
func record(t testing.TB, text string) []byte {
	t.Helper()
	b, err := encMode.Marshal(map[string]any{"$type": "app.bsky.feed.post", "text": text,
		"createdAt": "2026-12-02T02:00:00.000Z", "langs": []any{"en"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRecord(b); err != nil {
		t.Fatal(err)
	}
	return b
}

const testDID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
