package intentlog

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/internal/knobs"
)

const hour = int64(3_600_000) // ms

// at moves log time to ts with renewals by the holder "a" (epoch 1) that held() set
// up: as many as the bound on one entry's step needs (a holder renews at least once per
// TTL; an idle gap counts as one step).
func (h *harness) at(ts int64) {
	h.t.Helper()
	step := ts - h.f.View().LogTime
	if step <= 0 {
		h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: ts})
		return
	}
	for ; step > 0; step = ts - h.f.View().LogTime {
		h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: h.lastStamp() + min(step, h.maxStep())})
	}
}

func (h *harness) lastStamp() int64 {
	h.t.Helper()
	var m metaState
	if err := h.f.read(func(tx *bolt.Tx) (err error) { m, err = readMeta(tx); return err }); err != nil {
		h.t.Fatal(err)
	}
	if m.LastStamp == 0 {
		return m.LogTime
	}
	return m.LastStamp
}

func (h *harness) maxStep() int64 {
	a := applier{m: metaState{Lease: h.f.View().Lease, Genesis: h.f.View().Genesis}}
	return a.maxLogTimeStep()
}

// signAll signs every pending intent, in commits of at most 4096 ops.
func (h *harness) signAll() {
	h.t.Helper()
	for n := h.f.View().Pending; n > 0; n = h.f.View().Pending {
		if r, _ := h.commitPending(min(n, 4096)); !r.Accepted {
			h.t.Fatalf("commit: %s", r.Reason)
		}
	}
}

func status(t testing.TB, f *FSM, id string) (IntentResult, bool) {
	t.Helper()
	st, ok, err := (&Log{fsm: f}).IntentStatus(id)
	if err != nil {
		t.Fatal(err)
	}
	return st, ok
}

// Log time is the largest timestamp of the accepted entries that carry one; it never
// decreases, and rejected entries do not move it.
func TestLogTime(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b")
	lt := func() int64 { return h.f.View().LogTime }
	if lt() != 0 {
		t.Fatal("log time before any entry")
	}
	g := testGenesis()
	g.TS = 1000
	h.mustAccept(g)
	if lt() != 1000 {
		t.Fatalf("after genesis %d", lt())
	}
	// Version 4: a stamp by a new writer (a's first, after the genesis) moves nothing.
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 2000, TTL: 10})
	if lt() != 1000 {
		t.Fatalf("after a's claim %d", lt())
	}
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 1500}) // a's clock stepped back: log time stays
	if lt() != 1000 {
		t.Fatalf("log time moved to %d", lt())
	}
	h.apply(ClaimEntry{Holder: "b", Epoch: 9, PrevRev: h.rev(), TS: 99999, TTL: 10}) // rejected
	if lt() != 1000 {
		t.Fatalf("a rejected entry moved log time to %d", lt())
	}
	// The same writer's stamps move it from its highest stamp so far (2000).
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 2500})
	h.mustAccept(TransferEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), To: "b", TS: 3000})
	h.mustAccept(one(put("i", "c/r", "v")))
	if lt() != 2000 {
		t.Fatalf("after transfer %d", lt())
	}
	raw := testCommit{CommitInfo: CommitInfo{Seq: 1, Epoch: 2, Signer: "b", Ops: h.pending(), Time: 4000}, Sig: "ok"}.encode()
	h.mustAccept(CommitEntry{Raw: raw}) // b's first stamp
	if lt() != 2000 {
		t.Fatalf("after b's commit %d", lt())
	}
	h.mustAccept(RenewEntry{Holder: "b", Epoch: 2, PrevRev: h.rev(), TS: 4600})
	if lt() != 2600 {
		t.Fatalf("after b's renewal %d", lt())
	}
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 3, PrevRev: h.rev(), TS: 5000, TTL: 10, Force: true, Reason: "steal"})
	if lt() != 2600 {
		t.Fatalf("after steal %d", lt())
	}
	st, _ := status(t, h.f, "i")
	if st.LogTime != 2000 || st.Seq != 1 || st.Hash == ([32]byte{}) {
		t.Fatalf("status %+v", st)
	}
}

// DESIGN: an ID and its result are remembered for at least the retention, counted in
// log time, however many other intents come after it.
func TestDedupeRetryAfter100kIntentsStillDedupes(t *testing.T) {
	h := newHarness(t)
	held(h)
	first := h.mustAccept(one(put("the-one", "c/1", "v")))
	h.signAll()
	orig, _ := status(t, h.f, "the-one")
	for i := 0; i < 100; i++ {
		ins := make([]Intent, 1000)
		for j := range ins {
			ins[j] = put(fmt.Sprintf("other-%03d-%04d-xxxxxxxxxx", i, j), "c/2", "v")
		}
		h.mustAccept(IntentsEntry{Intents: ins})
		h.signAll()
		if i%10 == 0 {
			h.at(100 + int64(i)) // log time moves, but by far less than the retention
		}
	}
	r := h.apply(one(put("the-one", "c/1", "v")))
	got := r.Intents[0]
	if !got.Duplicate || got.Index != first.Index || got.Seq != orig.Seq || got.Hash != orig.Hash || got.LogTime != orig.LogTime {
		t.Fatalf("retry after 100k intents: %+v, want the original %+v", got, orig)
	}
	if v := h.f.View(); v.Remembered != 100_001 || v.Pending != 0 {
		t.Fatalf("view %+v", v)
	}
}

func TestDedupeRetryAfterSnapshotRestoreStillDedupes(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.mustAccept(IntentsEntry{Intents: []Intent{put("signed", "c/1", "v"), put("pending", "c/2", "v")}})
	h.commitPending(1)
	want := map[string]IntentResult{}
	for _, id := range []string{"signed", "pending"} {
		want[id], _ = status(t, h.f, id)
	}
	c := newHarness(t)
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(h.dump()))); err != nil {
		t.Fatal(err)
	}
	c.idx = h.idx
	for _, id := range []string{"signed", "pending"} {
		r := c.apply(one(put(id, "c/9", "different")))
		w := want[id]
		w.Duplicate = true
		if got := r.Intents[0]; got != w {
			t.Fatalf("retry of %s after restore: %+v, want %+v", id, got, w)
		}
	}
}

func TestDedupeRetryAfterRetentionIsNew(t *testing.T) {
	h := newHarness(t)
	held(h) // TS 100
	h.mustAccept(one(put("x", "c/1", "v")))
	h.signAll()
	h.at(100 + 24*hour) // exactly the retention: still remembered
	if r := h.apply(one(put("x", "c/1", "v"))); !r.Intents[0].Duplicate {
		t.Fatal("forgotten at exactly the retention")
	}
	h.at(100 + 24*hour + 1)
	if _, ok := status(t, h.f, "x"); ok {
		t.Fatal("still remembered after the retention")
	}
	r := h.apply(one(put("x", "c/1", "v")))
	if got := r.Intents[0]; !got.Accepted || got.Duplicate || got.Index != h.idx {
		t.Fatalf("retry after the retention: %+v, want accepted as new", got)
	}
}

// The retention comes from the genesis.
func TestDedupeRetentionFromGenesis(t *testing.T) {
	h := newHarness(t)
	g := testGenesis() // retention 1 h
	g.TS = 0
	h.mustAccept(g)
	held(h)
	h.mustAccept(one(put("x", "c/1", "v")))
	h.signAll()
	h.at(100 + hour + 1)
	if _, ok := status(t, h.f, "x"); ok {
		t.Fatal("remembered past the genesis's 1 h retention")
	}
}

// A pending (unsigned) ID is never forgotten, however old: its retry must find it.
func TestDedupeNeverEvictsPending(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.mustAccept(one(put("early-signed", "c/1", "v")))
	h.signAll()
	h.mustAccept(one(put("pending", "c/2", "v")))
	h.mustAccept(one(put("later", "c/3", "v")))
	h.at(100 + 100*hour)
	if _, ok := status(t, h.f, "early-signed"); ok {
		t.Fatal("an old signed ID was kept")
	}
	if r := h.apply(one(put("pending", "c/2", "v"))); !r.Intents[0].Duplicate {
		t.Fatal("a pending ID was forgotten")
	}
	if _, ok := status(t, h.f, "later"); !ok {
		t.Fatal("an ID behind a pending one was evicted out of order")
	}
	// Once signed, they go at the next eviction.
	h.signAll()
	h.at(100 + 100*hour + 1)
	if v := h.f.View(); v.Remembered != 0 {
		t.Fatalf("remembered %d after signing", v.Remembered)
	}
}

// A big log-time jump evicts at most evictPerEntry IDs per entry: no huge transaction.
func TestDedupeEvictionBoundedPerEntry(t *testing.T) {
	h := newHarness(t)
	held(h)
	const n = 10_000
	ins := make([]Intent, n)
	for i := range ins {
		ins[i] = put(fmt.Sprintf("id-%05d", i), "c/1", "v")
	}
	h.mustAccept(IntentsEntry{Intents: ins})
	h.signAll()
	h.at(100 + 24*hour) // exactly the retention: nothing goes yet
	if got := h.f.View().Remembered; got != n {
		t.Fatalf("at the retention %d remembered", got)
	}
	h.at(100 + 24*hour + 1) // one entry past it: all may go, evictPerEntry go
	left := []uint64{n - evictPerEntry}
	if got := h.f.View().Remembered; uint64(got) != left[0] {
		t.Fatalf("after one entry %d remembered, want %d", got, left[0])
	}
	h.mustAccept(one(put("new", "c/1", "v")))
	h.mustAccept(one(put("new2", "c/1", "v")))
	if got := h.f.View().Remembered; got != 2 {
		t.Fatalf("after three entries %d remembered, want the 2 new ones", got)
	}
}

// MaxIDs: when the cap is reached and the oldest ID is still within the retention, new
// intents are refused with backlog (retryable); once it may go, they are accepted.
func TestDedupeMaxIDsBacklog(t *testing.T) {
	h := newHarness(t)
	g := testGenesis()
	g.TS, g.MaxIDs = 0, 3
	h.mustAccept(g)
	held(h)
	h.mustAccept(IntentsEntry{Intents: []Intent{put("a", "c/1", ""), put("b", "c/1", ""), put("c", "c/1", "")}})
	h.signAll()
	before := h.stateDigest()
	r := h.apply(one(put("d", "c/1", "")))
	if r.Accepted || r.Intents[0].Reason != ReasonBacklog {
		t.Fatalf("fourth ID under a cap of 3: %+v", r)
	}
	if h.stateDigest() != before {
		t.Fatal("refused intent changed the state")
	}
	// A retry of a remembered one is still answered.
	if r := h.apply(one(put("a", "c/1", ""))); !r.Intents[0].Duplicate {
		t.Fatalf("retry at the cap: %+v", r)
	}
	h.at(100 + hour + 1) // past the genesis's 1 h retention
	if r := h.apply(one(put("d", "c/1", ""))); !r.Accepted {
		t.Fatalf("after the retention: %+v", r)
	}
}

// The pending queue is capped too (backlog), independently of the dedupe window.
func TestPendingCapBacklog(t *testing.T) {
	h := newHarness(t)
	h.f.maxPending = 2
	held(h)
	h.mustAccept(IntentsEntry{Intents: []Intent{put("a", "c/1", ""), put("b", "c/2", "")}})
	r := h.apply(one(put("c", "c/3", "")))
	if r.Accepted || r.Intents[0].Reason != ReasonBacklog {
		t.Fatalf("third intent with two pending and a cap of 2: %+v", r)
	}
	if r := h.apply(one(put("a", "c/1", ""))); !r.Intents[0].Duplicate {
		t.Fatalf("retry of pending a: %+v", r)
	}
	h.commitPending(1)
	h.mustAccept(one(put("c", "c/3", "")))
	if p := h.pending(); len(p) != 2 || p[0].ID != "b" || p[1].ID != "c" {
		t.Fatalf("pending %+v", p)
	}
}

// The DedupeCount knob restores the old count-only window: the oldest ID is forgotten
// once more than N are remembered, pending or not, so a retry of a pending intent is
// queued (and would be signed) twice. That is the bug; this is the knob's test.
func TestKnobDedupeCount(t *testing.T) {
	h := newHarness(t)
	h.f.knobs = knobs.Intentlog{DedupeCount: 2}
	held(h)
	h.mustAccept(one(put("a", "c/1", "")))
	h.mustAccept(one(put("b", "c/2", "")))
	h.mustAccept(one(put("c", "c/3", ""))) // evicts pending "a"
	if _, ok := status(t, h.f, "a"); ok {
		t.Fatal("with the knob, a should have been evicted")
	}
	r := h.apply(one(put("a", "c/1", "")))
	if !r.Accepted || r.Intents[0].Duplicate {
		t.Fatalf("retry of evicted pending a: %+v", r)
	}
	var ids []string
	for _, in := range h.pending() {
		ids = append(ids, in.ID)
	}
	if fmt.Sprint(ids) != "[a b c a]" {
		t.Fatalf("pending %v: want a queued twice", ids)
	}
}

// IntentStatus reports the whole remembered result.
func TestIntentStatusFullResult(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.at(5000)
	acc := h.mustAccept(one(put("s", "c/1", "v")))
	st, ok := status(t, h.f, "s")
	if !ok || st != (IntentResult{ID: "s", Accepted: true, Index: acc.Index, LogTime: 5000}) {
		t.Fatalf("pending status %+v %v", st, ok)
	}
	r, _ := h.commitPending(1)
	st, _ = status(t, h.f, "s")
	if st != (IntentResult{ID: "s", Accepted: true, Index: acc.Index, LogTime: 5000, Seq: 1, Hash: r.Head.Hash}) {
		t.Fatalf("signed status %+v", st)
	}
}

// Version-1 intents entries keep the old count window on replay (so a converted old
// snapshot and a replayed old log agree); IDs remembered before log time existed are
// counted from the first log time.
func TestDedupeV1EntriesAndLegacyIDs(t *testing.T) {
	h := newHarness(t)
	h.mustAccept(legacyClaim(ClaimEntry{Holder: "a", Epoch: 1, TS: 7777, TTL: 10}, 0))
	if lt := h.f.View().LogTime; lt != 0 {
		t.Fatalf("a v1 entry moved log time to %d", lt)
	}
	h.mustAccept(IntentsEntry{Intents: []Intent{put("old", "c/1", "")}, v1: true})
	h.apply(CommitEntry{Raw: commitRaw(h, nil), v1: true})
	if st, _ := status(t, h.f, "old"); st.Seq != 1 || st.LogTime != 0 {
		t.Fatalf("legacy status %+v", st)
	}
	// The first v2 timestamped entry starts log time; the legacy ID counts from there.
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 1_000_000})
	if _, ok := status(t, h.f, "old"); !ok {
		t.Fatal("legacy ID forgotten when log time started")
	}
	h.at(1_000_000 + 24*hour + 1)
	if _, ok := status(t, h.f, "old"); ok {
		t.Fatal("legacy ID kept past a retention after log time started")
	}
}

// The same entries give the same state however the batches are split (eviction
// included).
func TestDedupeEvictionDeterministicAcrossBatches(t *testing.T) {
	build := func(h *harness) []*raft.Log {
		held(h)
		var logs []*raft.Log
		add := func(e Entry) {
			h.mustAccept(e)
			b, _ := Encode(e)
			logs = append(logs, &raft.Log{Index: h.idx, Type: raft.LogCommand, Data: b})
		}
		for i := 0; i < 30; i++ {
			ins := make([]Intent, 400)
			for j := range ins {
				ins[j] = put(fmt.Sprintf("b%02d-%03d", i, j), "c/1", "")
			}
			add(IntentsEntry{Intents: ins})
			add(CommitEntry{Raw: commitRaw(h, nil)})
			add(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 100 + int64(i)*4*hour})
		}
		return logs
	}
	a := newHarness(t)
	logs := build(a)
	b := newHarness(t)
	b.f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: mustEncode(t, ClaimEntry{Holder: "a", Epoch: 1, TS: 100, TTL: 1000})})
	for i := 0; i < len(logs); i += 7 {
		b.f.ApplyBatch(logs[i:min(i+7, len(logs))])
	}
	if !bytes.Equal(a.dump(), b.dump()) {
		t.Fatal("batch split changed the state")
	}
	if n := a.f.View().Remembered; n == 0 || n >= 30*400 {
		t.Fatalf("remembered %d: the test should evict some but not all", n)
	}
}

func mustEncode(t testing.TB, e Entry) []byte {
	t.Helper()
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The knob's count window bounds carried ops too (they enter the window with their
// commit, not through an intents entry): a carried ID is forgotten once more than N
// came after it, and carrying it again is accepted (the old bug, on today's path).
func TestKnobDedupeCountCarried(t *testing.T) {
	h := newHarness(t)
	h.f.knobs = knobs.Intentlog{DedupeCount: 2}
	held(h)
	if r, _ := h.commitOps(5000, put("a", "c/1", ""), put("b", "c/2", "")); !r.Accepted {
		t.Fatalf("commit a b: %+v", r)
	}
	if r, _ := h.commitOps(5001, put("c", "c/3", "")); !r.Accepted { // evicts a
		t.Fatalf("commit c: %+v", r)
	}
	if v := h.f.View(); v.Remembered != 2 {
		t.Fatalf("remembered %d, want the knob's 2", v.Remembered)
	}
	if _, ok := status(t, h.f, "a"); ok {
		t.Fatal("with the knob, a should have been evicted")
	}
	if r, _ := h.commitOps(5002, put("a", "c/1", "")); !r.Accepted {
		t.Fatalf("carrying evicted a again: %+v", r)
	}
}
