package atproto

import (
	"fmt"
	"testing"

	"github.com/bluesky-social/indigo/atproto/repo/mst"

	"github.com/batonhq/baton/signer/chain"
)

// BenchmarkApply measures one commit of one put through Apply (what every replica's
// apply runs) on repositories of different sizes: the tree is loaded from the block
// store each time, so the cost grows with the repository.
func BenchmarkApply(b *testing.B) {
	for _, size := range []int{10, 1000} {
		b.Run(fmt.Sprintf("records=%d", size), func(b *testing.B) {
			k, _ := GenerateKey()
			r := newReplica()
			var ops []chain.Op
			for i := range size {
				ops = append(ops, chain.Op{ID: fmt.Sprint(i), Kind: chain.Put, Path: fmt.Sprintf("app.bsky.feed.post/k%06d", i), Value: record(b, fmt.Sprint(i))})
			}
			raw, err := Propose(k, r.bs, r.head, chain.Commit{Seq: 1, Epoch: 1, Signer: "p", Ops: ops}, testDID, "3l3qo2vutsw2b")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.apply(raw); err != nil {
				b.Fatal(err)
			}
			next, err := Propose(k, r.bs, r.head, chain.Commit{Seq: 2, Prev: r.hash[:], Epoch: 1, Signer: "p",
				Ops: []chain.Op{{ID: "n", Kind: chain.Put, Path: "app.bsky.feed.post/new", Value: record(b, "new")}}}, testDID, "3l3qo2vutsw2c")
			if err != nil {
				b.Fatal(err)
			}
			e, err := VerifyEnvelope(next)
			if err != nil {
				b.Fatal(err)
			}
			for _, cached := range []bool{false, true} {
				b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
					var c *TreeCache
					if cached {
						c = &TreeCache{}
						c.keep(r.head.Data, mustLoad(b, r))
					}
					for b.Loop() {
						// The cache holds the tree after the commit; put head's back (what
						// a replica has after applying the previous commit).
						if cached {
							c.keep(r.head.Data, mustLoad(b, r))
						}
						if _, err := c.Apply(r.bs, r.head, e); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

func mustLoad(b *testing.B, r *replica) *mst.Tree {
	b.StopTimer()
	defer b.StartTimer()
	t, err := loadTree(r.bs, r.head.Data)
	if err != nil {
		b.Fatal(err)
	}
	return t
}
