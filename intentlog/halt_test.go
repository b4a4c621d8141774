package intentlog

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// corrupted returns the encoding of e with one bit flipped in its fields.
func corrupted(t testing.TB, e Entry) []byte {
	t.Helper()
	b := mustEncode(t, e)
	b[len(b)/2] ^= 0x10
	if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped entry decodes with %v, want ErrCorrupt", err)
	}
	return b
}

// DESIGN: a corrupt entry is not a malformed one. Rejecting it would let this replica
// silently diverge from the others (their copy is fine), so the FSM halts: the entries
// before it in the batch are applied, it and everything after are not, the applied
// index stays, and Fault names raft.db and the index.
func TestCorruptEntryHaltsTheFSM(t *testing.T) {
	h := newHarness(t)
	held(h)
	logs := []*raft.Log{
		{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, one(put("before", "c/1", "v")))},
		{Index: 3, Type: raft.LogCommand, Data: corrupted(t, one(put("corrupt", "c/2", "v")))},
		{Index: 4, Type: raft.LogCommand, Data: mustEncode(t, one(put("after", "c/3", "v")))},
	}
	rejBefore := h.f.Rejections()
	out := h.f.ApplyBatch(logs)
	if r, ok := out[0].(Result); !ok || !r.Accepted {
		t.Fatalf("entry before the corrupt one: %#v", out[0])
	}
	for i := 1; i < 3; i++ {
		err, ok := out[i].(error)
		if !ok || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("result %d: %#v, want the fault", i, out[i])
		}
	}
	if v := h.f.View(); v.AppliedIndex != 2 || v.Pending != 1 {
		t.Fatalf("view after the halt %+v", v)
	}
	if _, ok := status(t, h.f, "after"); ok {
		t.Fatal("an entry after the corrupt one was applied")
	}
	if got := h.f.Rejections(); got[ReasonMalformed] != rejBefore[ReasonMalformed] {
		t.Fatal("the corrupt entry was counted as malformed")
	}
	err := h.f.Fault()
	var fe *FaultError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &fe) || fe.File != RaftFile || fe.Index != 3 || !fe.Halted {
		t.Fatalf("Fault() = %v (%+v)", err, fe)
	}
	for _, s := range []string{"raft.db", "index 3", "baton repair"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("fault %q does not say %q", err, s)
		}
	}
	// Halted: nothing further applies, whatever comes.
	dump := h.dump()
	out = h.f.ApplyBatch([]*raft.Log{{Index: 3, Type: raft.LogCommand, Data: mustEncode(t, one(put("x", "c/4", "v")))},
		{Index: 5, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(raft.Configuration{})}})
	if e, ok := out[0].(error); !ok || !errors.Is(e, ErrCorrupt) {
		t.Fatalf("apply while halted: %#v", out[0])
	}
	if !bytes.Equal(dump, h.dump()) || h.f.View().AppliedIndex != 2 {
		t.Fatal("a halted FSM applied something")
	}
	// And it takes no snapshot: Raft would compact the log past an entry this replica
	// never applied.
	if _, err := h.f.Snapshot(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("snapshot while halted: %v", err)
	}
}

// The halt does not depend on how the entries were batched.
func TestCorruptEntryHaltsAtTheSameIndexWhateverTheBatches(t *testing.T) {
	var logs []*raft.Log
	for i := 1; i <= 20; i++ {
		data := mustEncode(t, one(put(string(rune('a'+i)), "c/1", "v")))
		if i == 13 {
			data = corrupted(t, one(put("z", "c/1", "v")))
		}
		logs = append(logs, &raft.Log{Index: uint64(i), Type: raft.LogCommand, Data: data})
	}
	var ref []byte
	for _, size := range []int{1, 3, 7, 20} {
		h := newHarness(t)
		for i := 0; i < len(logs); i += size {
			h.f.ApplyBatch(logs[i:min(i+size, len(logs))])
		}
		if v := h.f.View(); v.AppliedIndex != 12 {
			t.Fatalf("batches of %d: applied %d, want 12", size, v.AppliedIndex)
		}
		if d := h.dump(); ref == nil {
			ref = d
		} else if !bytes.Equal(ref, d) {
			t.Fatalf("batches of %d: different state", size)
		}
	}
}

// A halted Log refuses proposals with its fault (and so does waiting for an index it
// will never apply); a corrupt or old-version entry never gets in through ApplyEncoded.
func TestHaltedLogRefusesProposals(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader().log
	res := c.propose(one(put("ok", "c/1", "v")))
	if _, err := l.ApplyEncoded(context.Background(), corrupted(t, one(put("x", "c/2", "v")))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ApplyEncoded of a corrupt entry: %v", err)
	}
	v1, _ := encodeV1(one(put("x", "c/2", "v")))
	if _, err := l.ApplyEncoded(context.Background(), v1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ApplyEncoded of a version-1 entry: %v", err)
	}
	if l.Fault() != nil {
		t.Fatalf("fault before any corruption: %v", l.Fault())
	}
	// Bytes that changed after the checks (simulated: handed to Raft directly).
	fut := l.Raft().Apply(corrupted(t, one(put("y", "c/3", "v"))), 5*time.Second)
	if err := fut.Error(); err != nil {
		t.Fatal(err)
	}
	if e, ok := fut.Response().(error); !ok || !errors.Is(e, ErrCorrupt) {
		t.Fatalf("response to the corrupt entry: %#v", fut.Response())
	}
	if !errors.Is(l.Fault(), ErrCorrupt) {
		t.Fatalf("Fault() = %v", l.Fault())
	}
	if _, err := l.Propose(context.Background(), one(put("z", "c/4", "v"))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Propose on a halted log: %v", err)
	}
	b := mustEncode(t, one(put("z", "c/4", "v")))
	if _, err := l.ApplyEncoded(context.Background(), b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ApplyEncoded on a halted log: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitApplied(ctx, res.Index+5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("WaitApplied past the halt: %v", err)
	}
}

// A halted replica gives up Raft leadership: a leader whose copy of an entry is corrupt
// would send it to followers that lack it, and it can apply nothing anyway.
func TestHaltedLeaderStepsDown(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.propose(one(put("ok", "c/1", "v")))
	ld := c.leader()
	ld.log.fsm.raise(&FaultError{File: RaftFile, Index: 99, Halted: true, Err: ErrCorrupt})
	waitFor(t, "leadership to leave the halted node", func() bool {
		nl := c.leader()
		return nl != ld
	})
	// The others carry on (retrying while leadership moves, possibly back to the halted
	// node for a moment, which steps down again).
	waitFor(t, "a proposal after the step-down", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := c.leader().log.Propose(ctx, one(put("after", "c/2", "v")))
		return err == nil && res.Accepted
	})
}
