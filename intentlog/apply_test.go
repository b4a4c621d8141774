package intentlog

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func put(id, path, val string) Intent {
	return Intent{ID: id, Op: OpPut, Path: path, Value: []byte(val)}
}
func del(id, path string) Intent { return Intent{ID: id, Op: OpDel, Path: path} }
func one(in Intent) IntentsEntry { return IntentsEntry{Intents: []Intent{in}} }

// held sets up a lease held by "a" at epoch 1 with ttl 1000.
func held(h *harness) {
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 100, TTL: 1000})
}

// heldWithPending additionally queues two intents.
func heldWithPending(h *harness) {
	held(h)
	h.mustAccept(IntentsEntry{Intents: []Intent{put("i1", "c/1", "v1"), del("i2", "c/2")}})
}

func commitRaw(h *harness, mod func(*testCommit)) []byte {
	v := h.f.View()
	c := testCommit{CommitInfo: CommitInfo{Seq: v.Head.Seq + 1, Epoch: v.Lease.Epoch,
		Signer: v.Lease.Holder, Ops: h.pending()}, Sig: "ok"}
	if v.Head.Seq > 0 {
		c.Prev = append([]byte{}, v.Head.Hash[:]...)
	}
	if mod != nil {
		mod(&c)
	}
	return c.encode()
}

// TestApplyRejects checks every reject rule of the DESIGN apply table: the entry is
// refused with the stated reason, counted, and changes nothing else.
func TestApplyRejects(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name  string
		setup func(h *harness)
		entry func(h *harness) Entry
		want  Reason
	}{
		{"intent del with value", nil, func(*harness) Entry { return one(Intent{ID: "i", Op: OpDel, Path: "c/r", Value: []byte("x")}) }, ReasonBadIntent},
		{"intent unknown op", nil, func(*harness) Entry { return one(Intent{ID: "i", Op: 7, Path: "c/r"}) }, ReasonBadIntent},
		{"intent empty id", nil, func(*harness) Entry { return one(put("", "c/r", "v")) }, ReasonBadIntent},
		{"intent id not utf8", nil, func(*harness) Entry { return one(put("\xff", "c/r", "v")) }, ReasonBadIntent},
		{"intent id too long", nil, func(*harness) Entry { return one(put(long(MaxIDLen+1), "c/r", "v")) }, ReasonTooLarge},
		{"intent path no slash", nil, func(*harness) Entry { return one(put("i", "rkey", "v")) }, ReasonBadPath},
		{"intent reserved lease key", nil, func(*harness) Entry { return one(put("i", "__lease__", "v")) }, ReasonBadPath},
		{"intent path leading slash", nil, func(*harness) Entry { return one(put("i", "/c/r", "v")) }, ReasonBadPath},
		{"intent path trailing slash", nil, func(*harness) Entry { return one(put("i", "c/r/", "v")) }, ReasonBadPath},
		{"intent path empty segment", nil, func(*harness) Entry { return one(put("i", "c//r", "v")) }, ReasonBadPath},
		{"intent path space", nil, func(*harness) Entry { return one(put("i", "c/r x", "v")) }, ReasonBadPath},
		{"intent path control", nil, func(*harness) Entry { return one(put("i", "c/r\n", "v")) }, ReasonBadPath},
		{"intent path too long", nil, func(*harness) Entry { return one(put("i", "c/"+long(MaxPathLen), "v")) }, ReasonTooLarge},
		{"intent value too long", nil, func(*harness) Entry { return one(put("i", "c/r", long(MaxValueLen+1))) }, ReasonTooLarge},
		{"intents empty", nil, func(*harness) Entry { return IntentsEntry{} }, ReasonBadEntry},
		{"claim stale rev", held, func(*harness) Entry { return ClaimEntry{Holder: "b", Epoch: 2, PrevRev: 0, TTL: 10} }, ReasonStaleRev},
		{"claim stale rev and epoch", held, func(*harness) Entry { return ClaimEntry{Holder: "b", Epoch: 1, PrevRev: 0, TTL: 10} }, ReasonStaleRev},
		{"claim future rev", held, func(h *harness) Entry { return ClaimEntry{Holder: "b", Epoch: 2, PrevRev: h.rev() + 1, TTL: 10} }, ReasonStaleRev},
		{"claim same epoch", held, func(h *harness) Entry { return ClaimEntry{Holder: "b", Epoch: 1, PrevRev: h.rev(), TTL: 10} }, ReasonEpochMismatch},
		{"claim epoch not stored+1", held, func(h *harness) Entry { return ClaimEntry{Holder: "b", Epoch: 3, PrevRev: h.rev(), TTL: 10} }, ReasonEpochMismatch},
		{"claim epoch wraps", nil, func(*harness) Entry { return ClaimEntry{Holder: "b", Epoch: 0, PrevRev: 0, TTL: 10} }, ReasonEpochMismatch},
		{"claim after renewal", func(h *harness) { held(h); h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 200}) },
			func(*harness) Entry { return ClaimEntry{Holder: "b", Epoch: 2, PrevRev: 1, TTL: 10} }, ReasonStaleRev},
		{"claim ttl zero", nil, func(*harness) Entry { return ClaimEntry{Holder: "b", Epoch: 1, TTL: 0} }, ReasonBadEntry},
		{"claim ttl negative", nil, func(*harness) Entry { return ClaimEntry{Holder: "b", Epoch: 1, TTL: -5} }, ReasonBadEntry},
		{"claim empty holder", nil, func(*harness) Entry { return ClaimEntry{Epoch: 1, TTL: 5} }, ReasonBadEntry},
		{"claim holder too long", nil, func(*harness) Entry { return ClaimEntry{Holder: long(MaxHolderLen + 1), Epoch: 1, TTL: 5} }, ReasonTooLarge},
		{"steal without reason", held, func(h *harness) Entry {
			return ClaimEntry{Holder: "b", Epoch: 2, PrevRev: h.rev(), TTL: 5, Force: true}
		}, ReasonNoReason},
		{"steal stale rev", held, func(*harness) Entry {
			return ClaimEntry{Holder: "b", Epoch: 2, PrevRev: 0, TTL: 5, Force: true, Reason: "wedged"}
		}, ReasonStaleRev},
		{"steal stale epoch", held, func(h *harness) Entry {
			return ClaimEntry{Holder: "b", Epoch: 1, PrevRev: h.rev(), TTL: 5, Force: true, Reason: "wedged"}
		}, ReasonEpochMismatch},
		{"renew free lease", nil, func(*harness) Entry { return RenewEntry{Holder: "a", Epoch: 0, TS: 5} }, ReasonNotHolder},
		{"renew wrong holder", held, func(*harness) Entry { return RenewEntry{Holder: "b", Epoch: 1, TS: 5} }, ReasonNotHolder},
		{"renew wrong epoch", held, func(*harness) Entry { return RenewEntry{Holder: "a", Epoch: 2, TS: 5} }, ReasonEpochMismatch},
		{"renew wrong epoch and rev", held, func(h *harness) Entry { return RenewEntry{Holder: "a", Epoch: 2, PrevRev: h.rev() + 3, TS: 5} }, ReasonEpochMismatch},
		{"renew stale rev", func(h *harness) { held(h); h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 200}) },
			func(*harness) Entry { return RenewEntry{Holder: "a", Epoch: 1, PrevRev: 1, TS: 300} }, ReasonStaleRev},
		{"renew future rev", held, func(h *harness) Entry { return RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev() + 1, TS: 300} }, ReasonStaleRev},
		{"renew after release", func(h *harness) { held(h); h.mustAccept(ReleaseEntry{Holder: "a", Epoch: 1, PrevRev: h.rev()}) },
			func(*harness) Entry { return RenewEntry{Holder: "a", Epoch: 1, TS: 5} }, ReasonNotHolder},
		{"release wrong holder", held, func(*harness) Entry { return ReleaseEntry{Holder: "b", Epoch: 1} }, ReasonNotHolder},
		{"release wrong epoch", held, func(*harness) Entry { return ReleaseEntry{Holder: "a", Epoch: 0} }, ReasonEpochMismatch},
		{"release empty holder", held, func(*harness) Entry { return ReleaseEntry{Holder: "", Epoch: 1} }, ReasonBadEntry},
		{"release stale rev", func(h *harness) { held(h); h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 200}) },
			func(*harness) Entry { return ReleaseEntry{Holder: "a", Epoch: 1, PrevRev: 1} }, ReasonStaleRev},
		{"transfer stale rev", func(h *harness) {
			h.members("a", "b")
			held(h)
			h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 200})
		},
			func(h *harness) Entry { return TransferEntry{Holder: "a", Epoch: 1, PrevRev: h.rev() - 1, To: "b"} }, ReasonStaleRev},
		{"transfer wrong holder", func(h *harness) { h.members("a", "b"); held(h) },
			func(*harness) Entry { return TransferEntry{Holder: "b", Epoch: 1, To: "b"} }, ReasonNotHolder},
		{"transfer wrong epoch", func(h *harness) { h.members("a", "b"); held(h) },
			func(*harness) Entry { return TransferEntry{Holder: "a", Epoch: 5, To: "b"} }, ReasonEpochMismatch},
		{"transfer to non member", func(h *harness) { h.members("a", "b"); held(h) },
			func(h *harness) Entry { return TransferEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), To: "z"} }, ReasonNotMember},
		{"transfer to removed member", func(h *harness) { h.members("a", "b"); held(h); h.members("a") },
			func(h *harness) Entry { return TransferEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), To: "b"} }, ReasonNotMember},
		{"transfer empty target", func(h *harness) { h.members("a", "b"); held(h) },
			func(h *harness) Entry { return TransferEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), To: ""} }, ReasonBadEntry},
		{"commit bad signature", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Sig = "forged" })}
		}, ReasonBadSignature},
		{"commit garbage", heldWithPending, func(h *harness) Entry { return CommitEntry{Raw: []byte("junk")} }, ReasonBadSignature},
		{"commit with free lease", func(h *harness) {
			heldWithPending(h)
			h.mustAccept(ReleaseEntry{Holder: "a", Epoch: 1, PrevRev: h.rev()})
		},
			func(h *harness) Entry {
				return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Signer = ""; c.Epoch = 1 })}
			}, ReasonNotHolder},
		{"commit released holder", func(h *harness) {
			heldWithPending(h)
			h.mustAccept(ReleaseEntry{Holder: "a", Epoch: 1, PrevRev: h.rev()})
		},
			func(h *harness) Entry {
				return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Signer = "a"; c.Epoch = 1 })}
			}, ReasonNotHolder},
		{"commit wrong signer", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Signer = "b" })}
		}, ReasonNotHolder},
		{"commit old epoch", func(h *harness) {
			heldWithPending(h)
			h.mustAccept(ClaimEntry{Holder: "a", Epoch: 2, PrevRev: h.rev(), TTL: 5})
		}, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Epoch = 1 })}
		}, ReasonEpochMismatch},
		{"commit seq1 with prev", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Prev = make([]byte, 32) })}
		}, ReasonBadPrev},
		{"commit wrong prev", func(h *harness) {
			heldWithPending(h)
			h.commitPending(1)
		}, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Prev[0] ^= 1 })}
		}, ReasonBadPrev},
		{"commit nil prev after seq1", func(h *harness) {
			heldWithPending(h)
			h.commitPending(1)
		}, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Prev = nil })}
		}, ReasonBadPrev},
		{"commit seq gap", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Seq = 2 })}
		}, ReasonBadSeq},
		{"commit replayed seq", func(h *harness) {
			heldWithPending(h)
			h.commitPending(1)
		}, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Seq = 1 })}
		}, ReasonBadSeq},
		{"commit no ops", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = nil })}
		}, ReasonBadOps},
		// Pending ops come first, in queue order; anything after is carried and must be
		// new: a pending intent out of its place is a carried op whose ID is remembered.
		{"commit ops out of order", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops[0], c.Ops[1] = c.Ops[1], c.Ops[0] })}
		}, ReasonDuplicateOp},
		{"commit skips oldest", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = c.Ops[1:] })}
		}, ReasonDuplicateOp},
		{"commit carries a pending op twice", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = append(c.Ops, c.Ops[0]) })}
		}, ReasonDuplicateOp},
		{"commit carries a signed id", func(h *harness) { heldWithPending(h); h.commitPending(1) }, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = append(c.Ops, put("i1", "c/1", "again")) })}
		}, ReasonDuplicateOp},
		{"commit carries an id twice", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = append(c.Ops, put("n", "c/9", "1"), put("n", "c/9", "2")) })}
		}, ReasonBadOps},
		{"commit carries an invalid op", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = append(c.Ops, put("n", "no-slash", "")) })}
		}, ReasonBadOps},
		{"commit carries a del with a value", held, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = []Intent{{ID: "n", Op: OpDel, Path: "c/1", Value: []byte("x")}} })}
		}, ReasonBadOps},
		{"commit pending op with its id changed value", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = []Intent{put("i1", "c/1", "other")} })}
		}, ReasonBadOps},
		{"commit changed value", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops[0].Value = []byte("v2") })}
		}, ReasonBadOps},
		{"commit changed path", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops[0].Path = "c/x" })}
		}, ReasonBadOps},
		{"commit changed op", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops[1].Op = OpPut })}
		}, ReasonBadOps},
		{"commit changed id", heldWithPending, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops[0].ID = "other" })}
		}, ReasonDuplicateOp}, // "other" is carried, then pending i2 out of its place
		{"commit carried op at the cap", func(h *harness) {
			g := testGenesis()
			g.MaxIDs = 2
			h.mustAccept(g)
			heldWithPending(h)
		}, func(h *harness) Entry {
			return CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Ops = append(c.Ops, put("n", "c/9", "")) })}
		}, ReasonBacklog},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.setup != nil {
				tc.setup(h)
			}
			e := tc.entry(h)
			before, beforeView := h.stateDigest(), h.f.View()
			beforeRej := h.f.Rejections()
			res := h.apply(e)
			if res.Accepted || res.Reason != tc.want {
				t.Fatalf("got accepted=%v reason=%q, want rejected %q", res.Accepted, res.Reason, tc.want)
			}
			if res.Index != h.idx {
				t.Errorf("result index %d, want %d", res.Index, h.idx)
			}
			if res.Lease != beforeView.Lease || res.Head != beforeView.Head {
				t.Errorf("result lease/head %+v %+v, want the unchanged %+v %+v", res.Lease, res.Head, beforeView.Lease, beforeView.Head)
			}
			if h.stateDigest() != before {
				t.Errorf("rejected entry changed the state")
			}
			if got := h.f.Rejections()[tc.want]; got != beforeRej[tc.want]+1 {
				t.Errorf("rejections[%s] = %d, want %d", tc.want, got, beforeRej[tc.want]+1)
			}
			if v := h.f.View(); v.AppliedIndex != h.idx {
				t.Errorf("applied index %d, want %d", v.AppliedIndex, h.idx)
			}
		})
	}
}

func TestApplyMalformed(t *testing.T) {
	h := newHarness(t)
	for _, b := range [][]byte{nil, {}, {9}, {CodecVersion, 99}, {CodecVersion, kindRenew, 5}} {
		before := h.stateDigest()
		res := h.applyRaw(b)
		if res.Accepted || res.Reason != ReasonMalformed {
			t.Fatalf("%x: got %+v", b, res)
		}
		if h.stateDigest() != before {
			t.Fatalf("%x changed state", b)
		}
	}
	if got := h.f.Rejections()[ReasonMalformed]; got != 5 {
		t.Fatalf("malformed count %d, want 5", got)
	}
}

func TestApplyIntents(t *testing.T) {
	h := newHarness(t)
	res := h.apply(IntentsEntry{Intents: []Intent{
		put("a", "c/1", "one"),
		put("", "c/2", "bad"),
		del("b", "c/3"),
		put("a", "c/4", "dup in same entry"),
	}})
	idx := h.idx
	if !res.Accepted || res.Reason != "" || len(res.Intents) != 4 {
		t.Fatalf("result %+v", res)
	}
	want := []IntentResult{
		{ID: "a", Accepted: true, Index: idx},
		{ID: "", Reason: ReasonBadIntent},
		{ID: "b", Accepted: true, Index: idx},
		{ID: "a", Accepted: true, Index: idx, Duplicate: true},
	}
	for i, w := range want {
		if res.Intents[i] != w {
			t.Errorf("intent %d: %+v, want %+v", i, res.Intents[i], w)
		}
	}
	v := h.f.View()
	if v.Pending != 2 || v.PendingBytes != int64(len("c/1")+len("one")+len("c/3")) {
		t.Fatalf("view %+v", v)
	}
	pend := h.pending()
	if len(pend) != 2 || pend[0].ID != "a" || pend[1].ID != "b" || pend[1].Value != nil {
		t.Fatalf("pending %+v", pend)
	}
	if h.f.Rejections()[ReasonBadIntent] != 1 {
		t.Fatalf("rejections %v", h.f.Rejections())
	}

	// A retry in a later entry is a no-op reporting the original result.
	before := h.stateDigest()
	res = h.apply(one(put("a", "c/1", "one")))
	if !res.Accepted || !res.Intents[0].Duplicate || res.Intents[0].Index != idx {
		t.Fatalf("retry %+v", res)
	}
	if h.stateDigest() != before {
		t.Fatal("duplicate changed the state")
	}
	// All rejected: the entry is rejected with the first reason.
	res = h.apply(IntentsEntry{Intents: []Intent{put("x", "nope", ""), put("", "c/1", "")}})
	if res.Accepted || res.Reason != ReasonBadPath {
		t.Fatalf("all-bad entry %+v", res)
	}
}

func TestApplyLeaseLifecycle(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b", "c")
	r := h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: 0, TS: 10, TTL: 500})
	if r.Lease != (Lease{Holder: "a", Epoch: 1, TS: 10, TTL: 500, Rev: 2}) {
		t.Fatalf("claim lease %+v", r.Lease)
	}
	r = h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: 2, TS: 20})
	if r.Lease != (Lease{Holder: "a", Epoch: 1, TS: 20, TTL: 500, Rev: 3}) {
		t.Fatalf("renew lease %+v", r.Lease)
	}
	r = h.mustAccept(TransferEntry{Holder: "a", Epoch: 1, PrevRev: 3, To: "b", TS: 30})
	if r.Lease != (Lease{Holder: "b", Epoch: 2, TS: 30, TTL: 500, Rev: 4}) {
		t.Fatalf("transfer lease %+v", r.Lease)
	}
	r = h.mustAccept(ReleaseEntry{Holder: "b", Epoch: 2, PrevRev: 4})
	if r.Lease != (Lease{Epoch: 2, TS: 30, TTL: 500, Rev: 5}) {
		t.Fatalf("release lease %+v", r.Lease)
	}
	// Epochs are never reused: a claim must build on the released epoch.
	if res := h.apply(ClaimEntry{Holder: "c", Epoch: 2, PrevRev: 5, TTL: 5}); res.Reason != ReasonEpochMismatch {
		t.Fatalf("claim on old epoch: %+v", res)
	}
	h.mustAccept(ClaimEntry{Holder: "c", Epoch: 3, PrevRev: 5, TS: 40, TTL: 700})
	r = h.mustAccept(ClaimEntry{Holder: "a", Epoch: 4, PrevRev: 7, TS: 50, TTL: 700, Force: true, Reason: "c wedged"})
	if r.Lease != (Lease{Holder: "a", Epoch: 4, TS: 50, TTL: 700, Rev: 8}) {
		t.Fatalf("steal lease %+v", r.Lease)
	}
	if v := h.f.View(); v.Lease != r.Lease {
		t.Fatalf("view lease %+v, result lease %+v", v.Lease, r.Lease)
	}
	hist := historyOf(t, h.f)
	want := []LeaseEvent{
		{Index: 2, Event: "claim", Holder: "a", Epoch: 1, TS: 10},
		{Index: 3, Event: "renew", Holder: "a", Epoch: 1, TS: 20},
		{Index: 4, Event: "transfer", Holder: "b", Epoch: 2, TS: 30, Prior: "a"},
		{Index: 5, Event: "release", Holder: "", Epoch: 2, TS: 30, Prior: "b"},
		{Index: 7, Event: "claim", Holder: "c", Epoch: 3, TS: 40},
		{Index: 8, Event: "steal", Holder: "a", Epoch: 4, TS: 50, Prior: "c", Reason: "c wedged"},
	}
	if len(hist) != len(want) {
		t.Fatalf("history %+v", hist)
	}
	for i := range want {
		if hist[i] != want[i] {
			t.Errorf("history[%d] = %+v, want %+v", i, hist[i], want[i])
		}
	}
}

func historyOf(t *testing.T, f *FSM) []LeaseEvent {
	t.Helper()
	l := &Log{fsm: f}
	hist, err := l.LeaseHistory()
	if err != nil {
		t.Fatal(err)
	}
	return hist
}

func TestApplyCommit(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.mustAccept(IntentsEntry{Intents: []Intent{put("i1", "c/1", "v1"), put("i2", "c/2", "v2"), put("i3", "c/3", "v3")}})
	acceptIdx := h.idx
	res, raw1 := h.commitPending(2)
	if !res.Accepted {
		t.Fatalf("commit 1 rejected: %s", res.Reason)
	}
	if res.Head != (Head{Seq: 1, Hash: sha256.Sum256(raw1), Epoch: 1, Signer: "a"}) {
		t.Fatalf("head %+v", res.Head)
	}
	v := h.f.View()
	if v.Pending != 1 || v.PendingBytes != int64(len("c/3v3")) || v.Head != res.Head {
		t.Fatalf("view %+v", v)
	}
	l := &Log{fsm: h.f}
	if val, ok, _ := l.Record("c/1"); !ok || string(val) != "v1" {
		t.Fatalf("record c/1 = %q %v", val, ok)
	}
	if _, ok, _ := l.Record("c/3"); ok {
		t.Fatal("unsigned intent visible as a record")
	}
	if got, err := l.Commit(1); err != nil || !bytes.Equal(got, raw1) {
		t.Fatalf("commit 1 = %x, %v", got, err)
	}
	if _, err := l.Commit(2); err != ErrNotFound {
		t.Fatalf("commit 2 err %v", err)
	}
	// The dedupe window now reports the seq that signed i1.
	dup := h.apply(one(put("i1", "c/1", "v1")))
	if d := dup.Intents[0]; !d.Duplicate || d.Seq != 1 || d.Index != acceptIdx {
		t.Fatalf("dup after sign %+v", d)
	}

	// Delete through a second commit, linked to the first.
	h.mustAccept(one(del("i4", "c/1")))
	res, raw2 := h.commitPending(2)
	if !res.Accepted || res.Head.Seq != 2 || res.Head.Hash != sha256.Sum256(raw2) {
		t.Fatalf("commit 2 %+v", res)
	}
	if _, ok, _ := l.Record("c/1"); ok {
		t.Fatal("deleted record still there")
	}
	recs, err := l.Records("c/", 0)
	if err != nil || len(recs) != 2 || recs[0].Path != "c/2" || recs[1].Path != "c/3" {
		t.Fatalf("records %+v %v", recs, err)
	}
	if recs, _ := l.Records("c/", 1); len(recs) != 1 {
		t.Fatalf("limit ignored: %+v", recs)
	}
	if h.f.View().Pending != 0 || h.f.View().PendingBytes != 0 {
		t.Fatalf("view %+v", h.f.View())
	}

	// A new holder continues the chain from the head under its own epoch.
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: 2, PrevRev: h.rev(), TTL: 5})
	h.mustAccept(one(put("i5", "d/1", "x")))
	if res := h.apply(CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Epoch, c.Signer = 1, "a" })}); res.Reason != ReasonNotHolder {
		t.Fatalf("old holder's commit: %+v", res)
	}
	if res, _ := h.commitPending(1); !res.Accepted || res.Head.Epoch != 2 || res.Head.Signer != "b" {
		t.Fatalf("new holder's commit %+v", res)
	}
}

func TestApplySkipsAppliedIndexes(t *testing.T) {
	h := newHarness(t)
	h.mustAccept(one(put("a", "c/1", "x")))
	b, _ := Encode(one(put("b", "c/2", "y")))
	before := h.dump()
	res := h.f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b}).(Result)
	if res.Accepted || res.Index != 1 {
		t.Fatalf("re-applied index 1: %+v", res)
	}
	if !bytes.Equal(before, h.dump()) {
		t.Fatal("skipped entry changed the state")
	}
}

func TestLeaseHistoryBounded(t *testing.T) {
	h := newHarness(t)
	h.f.historyLen = 3
	held(h)
	for i := int64(1); i <= 5; i++ {
		h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 100 + i})
	}
	hist := historyOf(t, h.f)
	if len(hist) != 3 || hist[0].TS != 103 || hist[2].TS != 105 {
		t.Fatalf("history %+v", hist)
	}
}

func TestMembersFromConfiguration(t *testing.T) {
	h := newHarness(t)
	h.members("b", "a")
	h.f.StoreConfiguration(h.idx+1, raft.Configuration{Servers: []raft.Server{
		{ID: "c", Address: "addr-c", Suffrage: raft.Nonvoter}, {ID: "a", Address: "addr-a"}}})
	ms, err := h.f.Members()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "a" || ms[0].Address != "addr-a" || ms[1].ID != "c" || ms[1].Suffrage != raft.Nonvoter {
		t.Fatalf("members %+v", ms)
	}
}
