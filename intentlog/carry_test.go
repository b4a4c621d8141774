package intentlog

import (
	"testing"
)

// commitOps applies a commit by the current holder over exactly ops, at commit time ts.
func (h *harness) commitOps(ts int64, ops ...Intent) (Result, []byte) {
	h.t.Helper()
	raw := commitRaw(h, func(c *testCommit) { c.Ops, c.Time = ops, ts })
	return h.apply(CommitEntry{Raw: raw}), raw
}

// DESIGN, Commit: a commit may carry its own ops (one Raft round per signed batch):
// they are checked like intents, enter the dedupe window directly with the commit's
// result, and update the records.
func TestCommitCarriesOps(t *testing.T) {
	h := newHarness(t)
	held(h)
	res, raw := h.commitOps(5000, put("c1", "c/1", "one"), del("c2", "c/2"), put("c3", "c/3", "three"))
	if !res.Accepted {
		t.Fatalf("commit of carried ops: %+v", res)
	}
	hash := res.Head.Hash
	if res.Head.Seq != 1 || hash != hashOf(raw) {
		t.Fatalf("head %+v", res.Head)
	}
	// The proposer can answer each carried op's submitter from the Result.
	if len(res.Intents) != 3 {
		t.Fatalf("result intents %+v", res.Intents)
	}
	for i, id := range []string{"c1", "c2", "c3"} {
		want := IntentResult{ID: id, Accepted: true, Index: res.Index, Seq: 1, Hash: hash, LogTime: 5000}
		if res.Intents[i] != want {
			t.Errorf("result %d = %+v, want %+v", i, res.Intents[i], want)
		}
		st, ok := status(t, h.f, id)
		if !ok || st != want {
			t.Errorf("status %s = %+v %v, want %+v", id, st, ok, want)
		}
	}
	l := &Log{fsm: h.f}
	if v, ok, _ := l.Record("c/3"); !ok || string(v) != "three" {
		t.Fatalf("record c/3 %q %v", v, ok)
	}
	if v := h.f.View(); v.Pending != 0 || v.Remembered != 3 {
		t.Fatalf("view %+v", v)
	}
	// A retry of a carried op as an intent reports the commit's result.
	r := h.apply(one(put("c1", "c/1", "one")))
	if got := r.Intents[0]; !got.Duplicate || got.Index != res.Index || got.Seq != 1 || got.Hash != hash {
		t.Fatalf("retry of a carried op: %+v", got)
	}
	if h.f.View().Pending != 0 {
		t.Fatal("retry of a carried op was queued")
	}
	// And a second commit carrying it again is refused with duplicate_op.
	if r, _ := h.commitOps(6000, put("c1", "c/1", "one")); r.Reason != ReasonDuplicateOp {
		t.Fatalf("carrying a signed op again: %+v", r)
	}
}

// Pending ops first (the oldest, in queue order, any number of them), then carried
// ones; records change in op order.
func TestCommitPendingPrefixThenCarried(t *testing.T) {
	h := newHarness(t)
	held(h)
	acc := h.mustAccept(IntentsEntry{Intents: []Intent{put("p1", "c/1", "pending-1"), put("p2", "c/2", "pending-2")}})
	res, _ := h.commitOps(7000, put("p1", "c/1", "pending-1"), put("n1", "c/1", "carried"), del("n2", "c/9"))
	if !res.Accepted {
		t.Fatalf("commit: %+v", res)
	}
	if res.Intents[0] != (IntentResult{ID: "p1", Accepted: true, Index: acc.Index, Seq: 1, Hash: res.Head.Hash, LogTime: 100}) {
		t.Fatalf("pending op's result %+v", res.Intents[0])
	}
	if res.Intents[1].Index != res.Index || res.Intents[1].LogTime != 7000 {
		t.Fatalf("carried op's result %+v", res.Intents[1])
	}
	if p := h.pending(); len(p) != 1 || p[0].ID != "p2" {
		t.Fatalf("pending after the commit %+v", p)
	}
	if v, _, _ := (&Log{fsm: h.f}).Record("c/1"); string(v) != "carried" {
		t.Fatalf("c/1 = %q: records must change in op order", v)
	}
	if v := h.f.View(); v.Pending != 1 || v.PendingBytes != int64(len("c/2pending-2")) || v.Remembered != 4 {
		t.Fatalf("view %+v", v)
	}
	// The rest of the queue can still be signed, and more carried.
	if r, _ := h.commitOps(8000, put("p2", "c/2", "pending-2"), put("n3", "c/3", "")); !r.Accepted {
		t.Fatalf("second commit %+v", r)
	}
}

// A refused carrying commit changes nothing (the table test checks each reason; this
// checks a refusal after a matching pending prefix leaves the prefix pending).
func TestCommitRefusedCarryLeavesQueue(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	before := h.stateDigest()
	if r, _ := h.commitOps(9000, put("i1", "c/1", "v1"), put("bad", "nopath", "")); r.Reason != ReasonBadOps {
		t.Fatalf("got %+v", r)
	}
	if h.stateDigest() != before || h.f.View().Pending != 2 {
		t.Fatal("refused commit changed the state")
	}
}

// Version-1 commits keep version 1's rule: their ops are exactly the oldest pending.
func TestCommitV1RuleOnReplay(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	raw := commitRaw(h, func(c *testCommit) { c.Ops = append(c.Ops, put("extra", "c/9", "")) })
	if r := h.apply(CommitEntry{Raw: raw, v1: true}); r.Reason != ReasonBadOps {
		t.Fatalf("v1 commit with an op beyond the queue: %+v", r)
	}
	raw = commitRaw(h, func(c *testCommit) { c.Ops = c.Ops[1:] })
	if r := h.apply(CommitEntry{Raw: raw, v1: true}); r.Reason != ReasonBadOps {
		t.Fatalf("v1 commit skipping the oldest: %+v", r)
	}
	if r := h.apply(CommitEntry{Raw: commitRaw(h, nil), v1: true}); !r.Accepted {
		t.Fatalf("v1 commit of the queue: %+v", r)
	}
}
