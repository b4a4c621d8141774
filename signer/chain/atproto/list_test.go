package atproto

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/chain"
)

// countingBlocks counts the blocks read.
type countingBlocks struct {
	bs Blocks
	n  int
}

func (c *countingBlocks) Get(cid []byte) ([]byte, error) {
	c.n++
	return c.bs.Get(cid)
}

// listChain builds a repository of about n records over several collections, some
// NSIDs a prefix of others (com.ex.x sorts after com.ex.x.y in key order), with deletes.
func listChain(t *testing.T, n int) (*replica, map[string][]byte) {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	colls := []string{"app.bsky.feed.post", "app.bsky.feed.like", "com.ex.x", "com.ex.x.y", "com.example.z"}
	rng := rand.New(rand.NewPCG(7, 11))
	r := newReplica()
	model := map[string][]byte{}
	now := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	for c := 0; len(model) < n; c++ {
		var ops []chain.Op
		used := map[string]bool{}
		for i := range 40 {
			coll := colls[rng.IntN(len(colls))]
			if coll == "com.example.z" && rng.IntN(8) != 0 {
				coll = "app.bsky.feed.post" // a small collection
			}
			path := fmt.Sprintf("%s/3l3qo2vut%04d", coll, rng.IntN(2*n))
			if used[path] {
				continue
			}
			used[path] = true
			id := fmt.Sprintf("c%d-%d", c, i)
			if _, ok := model[path]; ok && rng.IntN(3) == 0 {
				ops = append(ops, chain.Op{ID: id, Kind: chain.Del, Path: path})
				delete(model, path)
			} else {
				v := record(t, id)
				ops = append(ops, chain.Op{ID: id, Kind: chain.Put, Path: path, Value: v})
				model[path] = v
			}
		}
		now = now.Add(time.Second)
		rev, err := NextRev(now.UnixMicro(), now.UnixMicro(), r.head.Rev, 1)
		if err != nil {
			t.Fatal(err)
		}
		cm := chain.Commit{Seq: r.seq + 1, Epoch: 1, Signer: "peerA", Time: now.UnixMilli(), Ops: ops}
		if r.seq > 0 {
			cm.Prev = r.hash[:]
		}
		raw, err := Propose(k, r.bs, r.head, cm, k.DID(), rev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.apply(raw); err != nil {
			t.Fatal(err)
		}
	}
	return r, model
}

// TestListRecords pages through every collection of a repository of 600 records,
// both ways, with limits 1, 7 and 100, and compares each page with the model sorted
// by rkey (descending by default, as the reference PDS): the records, their CIDs and
// bytes, and whether more follow; cursors in the middle and past either end; a page
// reads a few nodes, not the tree; Collections is the sorted set of NSIDs.
func TestListRecords(t *testing.T) {
	r, model := listChain(t, 600)
	byColl := map[string][]string{}
	for p := range model {
		coll, _, _ := strings.Cut(p, "/")
		byColl[coll] = append(byColl[coll], p)
	}
	var colls []string
	for c, ps := range byColl {
		slices.Sort(ps)
		colls = append(colls, c)
	}
	slices.Sort(colls)
	got, err := Collections(r.bs, r.head)
	if err != nil || !slices.Equal(got, colls) {
		t.Fatalf("Collections: %v (%v), want %v", got, err, colls)
	}
	if len(colls) != 5 {
		t.Fatalf("collections %v: the test wants five", colls)
	}

	check := func(coll, cursor string, limit int, asc bool) (string, bool) {
		t.Helper()
		want := slices.Clone(byColl[coll])
		if !asc {
			slices.Reverse(want)
		}
		if cursor != "" {
			c := coll + "/" + cursor
			i := slices.IndexFunc(want, func(p string) bool {
				if asc {
					return p > c
				}
				return p < c
			})
			if i < 0 {
				i = len(want)
			}
			want = want[i:]
		}
		wantMore := len(want) > limit
		want = want[:min(limit, len(want))]
		recs, more, err := ListRecords(r.bs, r.head, coll, cursor, limit, asc)
		if err != nil {
			t.Fatalf("%s cursor %q limit %d asc %v: %v", coll, cursor, limit, asc, err)
		}
		var paths []string
		for _, rec := range recs {
			paths = append(paths, rec.Path)
			if !bytes.Equal(rec.Rec, model[rec.Path]) || !bytes.Equal(rec.CID, CIDOf(rec.Rec)) {
				t.Fatalf("%s: another record or CID", rec.Path)
			}
		}
		if !slices.Equal(paths, want) || more != wantMore {
			t.Fatalf("%s cursor %q limit %d asc %v: %v more %v, want %v more %v", coll, cursor, limit, asc, paths, more, want, wantMore)
		}
		if len(recs) == 0 {
			return "", false
		}
		_, rkey, _ := strings.Cut(recs[len(recs)-1].Path, "/")
		return rkey, more
	}
	for _, coll := range append(colls, "app.none", "app", "com.ex.x.y.z") {
		for _, limit := range []int{1, 7, 100} {
			for _, asc := range []bool{false, true} {
				// Page through with the last rkey as the cursor (what the handler answers).
				for cursor := ""; ; {
					next, more := check(coll, cursor, limit, asc)
					if !more {
						break
					}
					cursor = next
				}
			}
		}
		for _, cursor := range []string{"0", "3l3qo2vut0300", "3l3qo2vut0301x", "~"} {
			check(coll, cursor, 50, false)
			check(coll, cursor, 50, true)
		}
	}

	// One small page of the largest collection reads a path, not the tree.
	cb := &countingBlocks{bs: r.bs}
	if _, _, err := ListRecords(cb, r.head, "app.bsky.feed.post", "", 3, false); err != nil {
		t.Fatal(err)
	}
	all := &countingBlocks{bs: r.bs}
	if _, err := RepoBlocks(all, r.head); err != nil {
		t.Fatal(err)
	}
	if cb.n*5 > all.n {
		t.Fatalf("a page of 3 records read %d blocks; the whole repository is %d", cb.n, all.n)
	}
	page := cb.n
	cb.n = 0
	if _, err := Collections(cb, r.head); err != nil {
		t.Fatal(err)
	}
	t.Logf("blocks read: a page of 3 records %d, the %d collections %d; the repository has %d", page, len(colls), cb.n, all.n)
	if cb.n*2 > all.n {
		t.Fatalf("Collections read %d blocks; the whole repository is %d", cb.n, all.n)
	}

	// An empty repository lists nothing.
	if recs, more, err := ListRecords(memBlocks{}, Head{DID: testDID}, "app.x", "", 10, false); err != nil || len(recs) != 0 || more {
		t.Fatalf("empty repository: %v %v %v", recs, more, err)
	}
	if cs, err := Collections(memBlocks{}, Head{DID: testDID}); err != nil || len(cs) != 0 {
		t.Fatalf("empty repository: %v %v", cs, err)
	}
}
