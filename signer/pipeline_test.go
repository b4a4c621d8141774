package signer

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/batonhq/baton/intentlog"
)

// queueLog is a memLog with a Raft-like apply queue: intents entries handed to enqueue
// are reported by Inflight until they are applied, and they are applied, in order,
// before any later proposal (Raft appends a later proposal behind them).
type queueLog struct {
	*memLog
	qmu    sync.Mutex
	queued [][]intentlog.Intent
	wake   func()
}

var _ inflightSource = (*queueLog)(nil)

func (q *queueLog) enqueue(ins ...intentlog.Intent) {
	q.qmu.Lock()
	q.queued = append(q.queued, ins)
	q.qmu.Unlock()
	if q.wake != nil {
		q.wake()
	}
}

func (q *queueLog) Inflight() [][]intentlog.Intent {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	return append([][]intentlog.Intent(nil), q.queued...)
}

// flush applies the queued entries (an entry leaves Inflight once it is applied).
func (q *queueLog) flush() {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	for len(q.queued) > 0 {
		q.memLog.apply(intentlog.IntentsEntry{Intents: q.queued[0]})
		q.queued = q.queued[1:]
	}
}

func (q *queueLog) Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error) {
	q.flush()
	return q.memLog.Propose(ctx, e)
}

func newQueueHarness(t *testing.T) (*harness, *queueLog) {
	var q *queueLog
	h := newHarness(t, func(c *LoopConfig) {
		q = &queueLog{memLog: c.Log.(*memLog)}
		c.Log = q
	})
	q.wake = h.loop.Wake
	return h, q
}

// The holder signs intents that are queued but not applied, so that their entry and
// the commit share a Raft round; the apply (here: after the queue) accepts it.
func TestLoopSignsInFlightIntents(t *testing.T) {
	h, q := newQueueHarness(t)
	h.lease.grant(t, 1)
	h.start()
	mono := h.clock.Mono()
	q.enqueue(intents(0, 3)...)
	waitFor(t, "the in-flight intents signed", func() bool {
		v := h.log.View()
		return v.Head.Seq == 1 && v.Pending == 0
	})
	if h.clock.Mono() != mono {
		t.Fatal("clock moved: the test must not depend on ticks")
	}
	cs := checkChain(t, h.key, h.log, 3)
	if len(cs) != 1 {
		t.Fatalf("%d commits, want 1 signing the whole in-flight entry", len(cs))
	}
	if st := h.loop.Stats(); st.Predicted != 1 || st.Mispredicted != 0 || st.CommitsRejected != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Applied and in-flight intents together, in log order.
	h.log.submit(t, intents(3, 2)...)
	q.enqueue(intents(5, 2)...)
	waitFor(t, "all signed", func() bool { return h.log.View().Pending == 0 && len(q.Inflight()) == 0 })
	checkChain(t, h.key, h.log, 7)
}

// A wrong prediction (here a repeated ID that the apply drops) is refused for its
// ops; the loop then signs on the applied queue, at once, without stepping down.
func TestLoopMispredictionResyncs(t *testing.T) {
	h, q := newQueueHarness(t)
	h.lease.grant(t, 1)
	h.start()
	mono := h.clock.Mono()
	h.log.submit(t, intents(0, 1)...)
	waitFor(t, "first signed", func() bool { return h.log.View().Head.Seq == 1 })
	q.enqueue(append(intents(1, 1), intents(0, 1)...)...) // intent-000 again: a no-op
	waitFor(t, "the misprediction and the resync", func() bool {
		v := h.log.View()
		return v.Head.Seq == 2 && v.Pending == 0
	})
	if h.clock.Mono() != mono {
		t.Fatal("clock moved: the resync must not wait for a tick")
	}
	checkChain(t, h.key, h.log, 2)
	st := h.loop.Stats()
	if st.Mispredicted != 1 || st.CommitsRejected != 1 || st.Rejections[intentlog.ReasonBadOps] != 1 || st.StepDowns != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.LastError != "" {
		t.Fatalf("a misprediction is not an error: %q", st.LastError)
	}
}

// A commit whose proposal had an unknown outcome is proposed again as is: no other
// commit is signed for its seq while it may still apply.
func TestLoopReproposesUnsureCommit(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	var mu sync.Mutex
	failed := false
	h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := e.(intentlog.CommitEntry); ok && !failed {
			failed = true
			return intentlog.Result{}, intentlog.ErrTimeout, true // lost on the way
		}
		return intentlog.Result{}, nil, false
	})
	h.start()
	h.log.submit(t, intents(0, 1)...)
	waitFor(t, "the failed proposal", func() bool { return h.loop.Stats().ProposeErrors == 1 })
	// More intents: a commit built afresh would differ from the first.
	h.log.submit(t, intents(1, 2)...)
	h.tick()
	waitFor(t, "all signed", func() bool { return h.log.View().Pending == 0 })
	checkChain(t, h.key, h.log, 3)
	h.log.mu.Lock()
	props := append([][]byte(nil), h.log.proposedCommits...)
	h.log.mu.Unlock()
	if len(props) != 3 || !bytes.Equal(props[0], props[1]) || bytes.Equal(props[1], props[2]) {
		t.Fatalf("%d commit proposals (first two equal: %v), want the unsure one twice then the next", len(props), len(props) > 1 && bytes.Equal(props[0], props[1]))
	}
	if st := h.loop.Stats(); st.Reproposed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// An unknown outcome that did apply: the local head shows it, so nothing is proposed
// again and the loop moves on.
func TestLoopUnsureCommitThatApplied(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	var mu sync.Mutex
	failed := false
	h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := e.(intentlog.CommitEntry); ok && !failed {
			failed = true
			h.log.apply(e)
			return intentlog.Result{}, intentlog.ErrTimeout, true // applied, answer lost
		}
		return intentlog.Result{}, nil, false
	})
	h.start()
	h.log.submit(t, intents(0, 1)...)
	waitFor(t, "the failed proposal", func() bool { return h.loop.Stats().ProposeErrors == 1 })
	h.log.submit(t, intents(1, 1)...)
	h.tick()
	waitFor(t, "all signed", func() bool { return h.log.View().Pending == 0 })
	checkChain(t, h.key, h.log, 2)
	if st := h.loop.Stats(); st.Reproposed != 0 || h.log.commitProposals() != 2 {
		t.Fatalf("stats %+v, %d proposals", st, h.log.commitProposals())
	}
}
