package signer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// add hands intents to the loop and returns their tickets.
func (h *harness) add(ins ...intentlog.Intent) []*Ticket {
	h.t.Helper()
	var ts []*Ticket
	for _, in := range ins {
		t, err := h.loop.Add(in)
		if err != nil {
			h.t.Fatalf("add %s: %v", in.ID, err)
		}
		ts = append(ts, t)
	}
	return ts
}

// outcomes waits for every ticket and returns the outcomes.
func outcomes(t *testing.T, ts []*Ticket) []Outcome {
	t.Helper()
	var out []Outcome
	for _, tk := range ts {
		select {
		case <-tk.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a ticket was never decided")
		}
		out = append(out, tk.Outcome())
	}
	return out
}

// signatures returns every distinct commit the loop proposed, by (seq, epoch).
func signatures(t *testing.T, m *memLog) map[[2]uint64]map[string]bool {
	t.Helper()
	m.mu.Lock()
	props := append([][]byte(nil), m.proposedCommits...)
	m.mu.Unlock()
	out := map[[2]uint64]map[string]bool{}
	for _, raw := range props {
		c, err := chain.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		k := [2]uint64{c.Seq, c.Epoch}
		if out[k] == nil {
			out[k] = map[string]bool{}
		}
		out[k][string(raw)] = true
	}
	return out
}

func noEquivocation(t *testing.T, m *memLog) {
	t.Helper()
	for k, raws := range signatures(t, m) {
		if len(raws) > 1 {
			t.Fatalf("%d distinct commits signed for seq %d epoch %d", len(raws), k[0], k[1])
		}
	}
}

// A submission handed to the holder is carried by the commit that signs it: one
// proposal, no intents entry.
func TestLoopCarriesSubmissions(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	h.start()
	outs := outcomes(t, h.add(intents(0, 3)...))
	for i, o := range outs {
		if o.Err != nil || o.Seq == 0 || o.Index == 0 || o.Hash == ([chain.HashSize]byte{}) || o.Duplicate {
			t.Fatalf("outcome %d: %+v", i, o)
		}
	}
	checkChain(t, h.key, h.log, 3)
	if got := h.log.View().AppliedIndex; got > 2+uint64(len(h.log.chainCopy())) { // genesis, claim, commits
		t.Fatalf("applied index %d: entries other than the claim and the commits", got)
	}
	if st := h.loop.Stats(); st.CommitsSigned != st.CommitsAccepted || st.SignedRefused != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The same ID again: the original result, at once.
	again := outcomes(t, h.add(intents(1, 1)...))[0]
	if !again.Duplicate || again.Seq != outs[1].Seq || again.Index != outs[1].Index || again.Hash != outs[1].Hash {
		t.Fatalf("duplicate %+v, original %+v", again, outs[1])
	}
}

// Intents that reached the log without a holder (the pending queue) are signed first,
// then the queued submissions, in one commit.
func TestLoopSignsPendingBeforeCarried(t *testing.T) {
	h := newHarness(t, nil)
	h.log.submit(t, intents(0, 2)...)
	h.lease.grant(t, 1)
	ts := h.add(intents(2, 2)...)
	h.start()
	outcomes(t, ts)
	waitFor(t, "pending signed", func() bool { return h.log.View().Pending == 0 })
	checkChain(t, h.key, h.log, 4)
}

// Not holding: Add refuses; submissions queued when the hold ends are handed back.
func TestLoopAddWithoutHold(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	if _, err := h.loop.Add(intents(0, 1)[0]); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("add without the lease: %v", err)
	}
	h.lease.grant(t, 1)
	block := make(chan struct{})
	h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
		if _, ok := e.(intentlog.CommitEntry); ok {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return intentlog.Result{}, intentlog.ErrTimeout, true
		}
		return intentlog.Result{}, nil, false
	})
	first := h.add(intents(0, 1)...)
	waitFor(t, "the first commit proposed", func() bool { return h.log.commitProposals() == 1 })
	queued := h.add(intents(1, 1)...) // waits behind the unsure commit
	h.lease.setHolds(false)
	h.loop.Wake()
	if o := outcomes(t, queued)[0]; !errors.Is(o.Err, ErrNotHolder) {
		t.Fatalf("queued submission after the hold ended: %+v", o)
	}
	close(block)
	select {
	case <-first[0].Done():
		t.Fatal("a submission whose commit may still apply was decided")
	default:
	}
}

// A commit whose proposal had an unknown outcome is proposed again as is (at the
// tick): no other commit is signed for its seq while it may still apply.
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
	first := h.add(intents(0, 1)...)
	waitFor(t, "the failed proposal", func() bool { return h.loop.Stats().ProposeErrors == 1 })
	// More submissions: a commit built afresh would differ from the first.
	second := h.add(intents(1, 2)...)
	h.tick()
	outcomes(t, append(first, second...))
	checkChain(t, h.key, h.log, 3)
	h.log.mu.Lock()
	props := append([][]byte(nil), h.log.proposedCommits...)
	h.log.mu.Unlock()
	if len(props) != 3 || !bytes.Equal(props[0], props[1]) || bytes.Equal(props[1], props[2]) {
		t.Fatalf("%d commit proposals, want the unsure one twice then the next", len(props))
	}
	if st := h.loop.Stats(); st.Reproposed != 1 {
		t.Fatalf("stats %+v", st)
	}
	noEquivocation(t, h.log)
}

// An unknown outcome that did apply: the local chain shows it, so it is not proposed
// again, its submitters get their result, and the loop moves on.
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
	o := outcomes(t, h.add(intents(0, 1)...))[0]
	if o.Err != nil || o.Seq != 1 {
		t.Fatalf("outcome %+v", o)
	}
	outcomes(t, h.add(intents(1, 1)...))
	checkChain(t, h.key, h.log, 2)
	if st := h.loop.Stats(); st.Reproposed != 0 || h.log.commitProposals() != 2 {
		t.Fatalf("stats %+v, %d proposals", st, h.log.commitProposals())
	}
}

// A refused commit ends signing under its epoch: the loop moves to epoch+1 before it
// signs its seq again, so the chain key never signs two commits for one (seq, epoch).
// Here another device's intents entry with the same ID lands first (duplicate_op).
func TestLoopRefusalBumpsTheEpoch(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	var mu sync.Mutex
	raced := false
	h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := e.(intentlog.CommitEntry); ok && !raced {
			raced = true
			h.log.apply(intentlog.IntentsEntry{Intents: intents(1, 1)}) // the second ID, via the log
		}
		return intentlog.Result{}, nil, false
	})
	ts := h.add(intents(0, 2)...) // one commit carries both
	h.start()
	outs := outcomes(t, ts)
	waitFor(t, "everything signed", func() bool { return h.log.View().Pending == 0 })
	signedOnce(t, h.key, h.log, intents(0, 2))
	noEquivocation(t, h.log)
	st := h.loop.Stats()
	if st.Bumps != 1 || st.SignedRefused != 1 || st.CommitsRejected != 1 {
		t.Fatalf("stats %+v", st)
	}
	if outs[0].Err != nil || outs[0].Seq == 0 || !outs[1].Duplicate || outs[1].Index == 0 {
		t.Fatalf("outcomes %+v", outs)
	}
	if ep := h.log.View().Lease.Epoch; ep != 2 {
		t.Fatalf("lease epoch %d, want 2 (bumped once)", ep)
	}
}

func TestLoopAddDeduplicatesQueued(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	in := intents(0, 1)[0]
	a := h.add(in)
	b := h.add(in)
	h.start()
	outs := outcomes(t, append(a, b...))
	if outs[0].Duplicate || !outs[1].Duplicate || outs[0].Seq != outs[1].Seq || outs[0].Hash != outs[1].Hash {
		t.Fatalf("outcomes %+v", outs)
	}
	checkChain(t, h.key, h.log, 1)
}

// signedOnce verifies the chain and that it holds exactly the IDs of want, once each.
func signedOnce(t *testing.T, key chain.Key, m *memLog, want []intentlog.Intent) {
	t.Helper()
	raws := m.chainCopy()
	if err := chain.VerifyChain(raws, key.DID()); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range raws {
		c, _ := chain.Decode(r)
		for _, op := range c.Ops {
			got[op.ID]++
		}
	}
	for _, in := range want {
		if got[in.ID] != 1 {
			t.Fatalf("%s signed %d times", in.ID, got[in.ID])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("chain holds %d IDs, want %d", len(got), len(want))
	}
}

// An unhealthy device (a storage fault, a diverged replica) neither signs nor keeps
// the lease: the lease tick releases it, and nothing is signed until it is healthy.
func TestLoopUnhealthyReleasesAndNeverSigns(t *testing.T) {
	var sick atomic.Bool
	h := newHarness(t, func(c *LoopConfig) {
		c.Healthy = func() error {
			if sick.Load() {
				return errors.New("state digest differs from the other replicas'")
			}
			return nil
		}
	})
	h.lease.grant(t, 1)
	h.start()
	outcomes(t, h.add(intents(0, 1)...))
	sick.Store(true)
	h.log.submit(t, intents(1, 1)...)
	h.tick()
	if _, releases := h.lease.counts(); releases == 0 || h.lease.Holds() {
		t.Fatal("an unhealthy holder kept the lease")
	}
	if n := h.log.commitProposals(); n != 1 {
		t.Fatalf("%d commits proposed, want only the one before the fault", n)
	}
	if _, err := h.loop.Add(intents(2, 1)[0]); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("add on an unhealthy device: %v", err)
	}
}

// The local replica applied a commit the leader's apply refused: this replica's state
// differs from the others'. The loop says so (Diverged) instead of signing on, whichever
// it learns first: the leader's answer, or the local replica's apply. (Before, the loop
// looked at the answer only while the commit was in flight: when the local apply came
// first, the commit left flight as applied and the refusal that came after it was never
// read. On a loaded machine that order was common enough to fail the README's test
// command; it is forced here.)
func TestLoopReportsDivergence(t *testing.T) {
	for _, order := range []string{"answer first", "local replica first"} {
		t.Run(order, func(t *testing.T) {
			var got atomic.Pointer[error]
			h := newHarness(t, func(c *LoopConfig) { c.Diverged = func(err error) { got.Store(&err) } })
			h.lease.grant(t, 1)
			var once sync.Once
			var refused atomic.Pointer[intentlog.Entry] // answered, not yet applied locally
			h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
				if _, ok := e.(intentlog.CommitEntry); !ok {
					// The local replica applies the log in order: the refused commit
					// before the loop's next entry (its move to the next epoch).
					if ce := refused.Swap(nil); ce != nil {
						if local := h.log.apply(*ce); !local.Accepted {
							t.Errorf("local apply of the refused commit: %+v", local)
						}
					}
					return intentlog.Result{}, nil, false
				}
				handled := false
				var res intentlog.Result
				once.Do(func() {
					handled = true
					if order == "answer first" {
						// The leader, whose state differs, refused the entry at the
						// next index; the local replica applies it there later.
						refused.Store(&e)
						res = intentlog.Result{Index: h.log.View().AppliedIndex + 1, Reason: intentlog.ReasonBadPrev}
						return
					}
					// The local replica accepts it, and the loop sees that, before the
					// leader's refusal of the same entry comes back.
					local := h.log.apply(e)
					waitFor(t, "the local apply taken", func() bool { return h.loop.Stats().CommitsAccepted >= 1 })
					res = intentlog.Result{Index: local.Index, Reason: intentlog.ReasonBadPrev}
				})
				return res, nil, handled
			})
			h.start()
			h.add(intents(0, 1)...)
			waitFor(t, "the divergence reported", func() bool { return got.Load() != nil })
			if err := *got.Load(); !strings.Contains(err.Error(), "differs") {
				t.Fatalf("report: %v", err)
			}
		})
	}
}
