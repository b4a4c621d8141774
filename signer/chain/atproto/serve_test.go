package atproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/bluesky-social/indigo/events"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/signer/chain"
)

// serveChain builds a chain of n commits of random ops on one replica and returns
// the replica and the envelopes.
func serveChain(t *testing.T, n int) (*replica, [][]byte, map[string][]byte) {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(22, 3))
	r := newReplica()
	model := map[string][]byte{}
	var raws [][]byte
	now := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	for i := range n {
		now = now.Add(time.Second)
		rev, err := NextRev(now.UnixMicro(), now.UnixMicro(), r.head.Rev, 1)
		if err != nil {
			t.Fatal(err)
		}
		ops := randomOps(t, rng, model, fmt.Sprintf("c%d", i))
		if i == n/2 {
			ops = nil // a commit that changes nothing
		}
		c := chain.Commit{Seq: r.seq + 1, Epoch: 1, Signer: "peerA", Time: now.UnixMilli(), Ops: ops}
		if r.seq > 0 {
			c.Prev = r.hash[:]
		}
		raw, err := Propose(k, r.bs, r.head, c, k.DID(), rev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.apply(raw); err != nil {
			t.Fatal(err)
		}
		for _, op := range ops {
			if op.Kind == chain.Put {
				model[op.Path] = op.Value
			} else {
				delete(model, op.Path)
			}
		}
		raws = append(raws, raw)
	}
	return r, raws, model
}

// TestCommitFrameIndigo rebuilds every commit's event from the replica's blocks
// (StepOf, with and without a tree cache, consecutive and out of order), encodes it
// as a #commit frame and has indigo's own stream code read it: the frame parses
// (events.XRPCStreamEvent.Deserialize), re-encodes through indigo's cbor-gen types to
// the same bytes, and passes repo.VerifyCommitMessage; since and prevData chain up.
func TestCommitFrameIndigo(t *testing.T) {
	ctx := context.Background()
	r, raws, _ := serveChain(t, 60)
	frames := func(trees *TreeCache, order []int) map[int][]byte {
		out := map[int][]byte{}
		for _, i := range order {
			e, err := DecodeEnvelope(raws[i])
			if err != nil {
				t.Fatal(err)
			}
			var prev *Envelope
			if i > 0 {
				p, err := DecodeEnvelope(raws[i-1])
				if err != nil {
					t.Fatal(err)
				}
				prev = &p
			}
			ph, st, err := StepOf(r.bs, prev, e, trees)
			if err != nil {
				t.Fatalf("seq %d: %v", i+1, err)
			}
			ev, err := NewEvent(ph, st)
			if err != nil {
				t.Fatal(err)
			}
			f, err := CommitFrame(uint64(i+1), ev, time.UnixMilli(e.Commit.Time))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = f
		}
		return out
	}
	seqOrder := make([]int, len(raws))
	for i := range seqOrder {
		seqOrder[i] = i
	}
	cached := frames(&TreeCache{}, seqOrder)
	shuffled := append([]int(nil), seqOrder...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	uncached := frames(nil, shuffled)
	var lastRev string
	var lastData []byte
	for i := range raws {
		f := cached[i]
		if !bytes.Equal(f, uncached[i]) {
			t.Fatalf("seq %d: the frame depends on the tree cache or the order", i+1)
		}
		var xev events.XRPCStreamEvent
		if err := xev.Deserialize(bytes.NewReader(f)); err != nil {
			t.Fatalf("seq %d: indigo cannot read the frame: %v", i+1, err)
		}
		msg := xev.RepoCommit
		if msg == nil {
			t.Fatalf("seq %d: not a #commit", i+1)
		}
		var re bytes.Buffer
		if err := xev.Serialize(&re); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(re.Bytes(), f) {
			t.Fatalf("seq %d: indigo re-encodes the frame differently:\n%x\n%x", i+1, re.Bytes(), f)
		}
		if msg.Seq != int64(i+1) {
			t.Fatalf("seq %d: frame seq %d", i+1, msg.Seq)
		}
		if _, err := repo.VerifyCommitMessage(ctx, msg); err != nil {
			t.Fatalf("seq %d: indigo VerifyCommitMessage: %v", i+1, err)
		}
		since := ""
		if msg.Since != nil {
			since = *msg.Since
		}
		var pd []byte
		if msg.PrevData != nil {
			pd = cid.Cid(*msg.PrevData).Bytes()
		}
		if since != lastRev || !bytes.Equal(pd, lastData) {
			t.Fatalf("seq %d: since %q prevData %x, want %q %x", i+1, since, pd, lastRev, lastData)
		}
		e, _ := DecodeEnvelope(raws[i])
		lastRev, lastData = msg.Rev, e.Repo.Data
	}
	if lastRev != r.head.Rev {
		t.Fatalf("last rev %s, head %s", lastRev, r.head.Rev)
	}
	// StepOf refuses a commit that is not the one before.
	e3, _ := DecodeEnvelope(raws[3])
	e1, _ := DecodeEnvelope(raws[1])
	if _, _, err := StepOf(r.bs, &e1, e3, nil); err == nil {
		t.Fatal("StepOf accepted seq 2 as the commit before seq 4")
	}
	f := ErrorFrame("FutureCursor", "cursor 9 is past the head 4")
	var xev events.XRPCStreamEvent
	if err := xev.Deserialize(bytes.NewReader(f)); err != nil || xev.Error == nil || xev.Error.Error != "FutureCursor" {
		t.Fatalf("indigo reads the error frame as %+v (%v)", xev.Error, err)
	}
}

// TestRecordProofIndigo checks getRecord's proof with indigo: the CAR of RecordProof
// loads (repo.LoadRepoFromCAR), its commit is the head's, and the partial tree it
// holds answers the record (and its CID) for a present path and "not found" for an
// absent one. Without one of the path's MST nodes indigo cannot answer (the proof is
// the path, nothing less).
func TestRecordProofIndigo(t *testing.T) {
	ctx := context.Background()
	r, _, model := serveChain(t, 40)
	load := func(bl []Block) *repo.Repo {
		t.Helper()
		var car bytes.Buffer
		if err := WriteCAR(&car, r.head.Commit, bl); err != nil {
			t.Fatal(err)
		}
		ic, ir, err := repo.LoadRepoFromCAR(ctx, &car)
		if err != nil {
			t.Fatalf("indigo LoadRepoFromCAR: %v", err)
		}
		if root, err := ir.MST.RootCID(); err != nil || !bytes.Equal(root.Bytes(), r.head.Data) || ic.Rev != r.head.Rev {
			t.Fatalf("the proof's commit is not the head's")
		}
		return ir
	}
	n, deep := 0, 0
	for path, rec := range model {
		bl, c, err := RecordProof(r.bs, r.head, path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c, CIDOf(rec)) {
			t.Fatalf("%s: cid %x", path, c)
		}
		nsid, rkey, _ := syntax.ParseRepoPath(path)
		got, gc, err := load(bl).GetRecordBytes(ctx, nsid, rkey)
		if err != nil || !bytes.Equal(got, rec) || !bytes.Equal(gc.Bytes(), c) || !bytes.Equal(CIDOf(got), c) {
			t.Fatalf("%s: indigo reads %x (%v) from the proof", path, got, err)
		}
		if len(bl) > 3 { // commit, root, deeper nodes, record
			deep++
			cut := append(append([]Block(nil), bl[:2]...), bl[3:]...)
			if _, _, err := load(cut).GetRecordBytes(ctx, nsid, rkey); !errors.Is(err, mst.ErrPartialTree) {
				t.Fatalf("%s: a proof without a node on the path: %v, want ErrPartialTree", path, err)
			}
		}
		n++
	}
	if n == 0 || deep == 0 {
		t.Fatalf("%d records, %d below the root: the test proves nothing", n, deep)
	}
	for i := range 20 {
		path := fmt.Sprintf("app.bsky.feed.post/3zzabsent%04d", i)
		bl, c, err := RecordProof(r.bs, r.head, path)
		if err != nil || c != nil {
			t.Fatalf("absent %s: %x %v", path, c, err)
		}
		nsid, rkey, _ := syntax.ParseRepoPath(path)
		if got, err := load(bl).GetRecordCID(ctx, nsid, rkey); !errors.Is(err, repo.ErrNotFound) {
			t.Fatalf("absent %s: indigo reads %v (%v) from the proof, want ErrNotFound", path, got, err)
		}
		if len(bl) > 2 {
			cut := append(append([]Block(nil), bl[:2]...), bl[3:]...)
			if _, err := load(cut).GetRecordCID(ctx, nsid, rkey); !errors.Is(err, mst.ErrPartialTree) {
				t.Fatalf("absent %s: a proof without a node on the path: %v, want ErrPartialTree", path, err)
			}
		}
	}
}

// TestRecordJSON converts records to atproto JSON and has indigo read the JSON back
// into the same DAG-CBOR bytes (atdata.UnmarshalJSON, atdata.MarshalCBOR): links,
// bytes, nesting, integers of both signs.
func TestRecordJSON(t *testing.T) {
	c := CIDOf([]byte{0xa0})
	rec, err := encMode.Marshal(map[string]any{"$type": "app.example.thing", "text": "héllo \"q\"",
		"n": -7, "big": uint64(1) << 40, "ok": true, "none": nil, "list": []any{"a", int64(2), []any{}},
		"raw": []byte{0, 1, 2, 250}, "ref": link(c), "nested": map[string]any{"z": "last", "a": map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := RecordJSON(rec)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := atdata.UnmarshalJSON(js)
	if err != nil {
		t.Fatalf("indigo cannot read %s: %v", js, err)
	}
	back, err := atdata.MarshalCBOR(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, rec) {
		t.Fatalf("indigo reads %s back as other bytes:\n%x\n%x", js, back, rec)
	}
	if _, err := RecordJSON([]byte("not cbor")); err == nil {
		t.Fatal("RecordJSON accepted a non-record")
	}
}

// TestTreePool rebuilds two interleaved runs of steps (from seq 1 and from seq 31, as
// two streams backfilling at once): a pool of two trees loads a tree once (the second
// run's start), a pool of one at every step of the second run, and the steps are the
// ones Apply stored either way.
func TestTreePool(t *testing.T) {
	r, raws, _ := serveChain(t, 60)
	envs := make([]Envelope, len(raws))
	for i, raw := range raws {
		e, err := DecodeEnvelope(raw)
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	want := make([]Step, len(raws))
	rp := newReplica()
	for i, raw := range raws {
		st, err := rp.apply(raw)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = st
	}
	run := func(p *TreePool) {
		t.Helper()
		for k := range 30 {
			for _, i := range []int{k, 30 + k} {
				var prev *Envelope
				if i > 0 {
					prev = &envs[i-1]
				}
				_, st, err := p.StepOf(r.bs, prev, envs[i])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(st.Head.Commit, want[i].Head.Commit) || len(st.Blocks) != len(want[i].Blocks) {
					t.Fatalf("seq %d: the pool's step is not the apply's", i+1)
				}
				for j := range st.Blocks {
					if !bytes.Equal(st.Blocks[j].CID, want[i].Blocks[j].CID) {
						t.Fatalf("seq %d: block %d differs", i+1, j)
					}
				}
			}
		}
	}
	two, one := NewTreePool(2), NewTreePool(1)
	run(two)
	run(one)
	if two.misses != 1 || one.misses < 30 {
		t.Fatalf("tree loads: %d with two trees (want 1), %d with one (want 30 or more)", two.misses, one.misses)
	}
}
