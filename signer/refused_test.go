package signer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer/chain"
)

// Refused commits (refused.go) on a real intent log (Raft, bbolt, the apply).

// commitSpy wraps a loop's log: it records every distinct commit proposed, by seq.
type commitSpy struct {
	fwdLog
	mu     sync.Mutex
	bySeq  map[uint64]map[[chain.HashSize]byte]uint64 // seq -> hash -> epoch
	before func(ctx context.Context, raw []byte) (intentlog.Result, error, bool)
	// frozen, while set, is the view the loop sees: a local replica that lags.
	frozen atomic.Pointer[intentlog.View]
}

func (s *commitSpy) View() intentlog.View {
	if v := s.frozen.Load(); v != nil {
		return *v
	}
	return s.fwdLog.View()
}

func (s *commitSpy) Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error) {
	if ce, ok := e.(intentlog.CommitEntry); ok {
		if c, err := chain.Decode(ce.Raw); err == nil {
			s.mu.Lock()
			if s.bySeq[c.Seq] == nil {
				s.bySeq[c.Seq] = map[[chain.HashSize]byte]uint64{}
			}
			s.bySeq[c.Seq][chain.Hash(ce.Raw)] = c.Epoch
			s.mu.Unlock()
		}
		if s.before != nil {
			if res, err, done := s.before(ctx, ce.Raw); done {
				return res, err
			}
		}
	}
	return s.fwdLog.Propose(ctx, e)
}

// signedPerSeq returns the most distinct commits signed for one seq, and checks that
// no (seq, epoch) was signed twice.
func (s *commitSpy) signedPerSeq(t *testing.T) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	most := 0
	for seq, m := range s.bySeq {
		most = max(most, len(m))
		epochs := map[uint64]bool{}
		for _, ep := range m {
			if epochs[ep] {
				t.Errorf("two commits signed for seq %d epoch %d", seq, ep)
			}
			epochs[ep] = true
		}
	}
	return most
}

func spyCluster(t *testing.T, k *knobs.Signer, mod func(*clusterOpts)) (*sigCluster, *commitSpy) {
	spy := &commitSpy{bySeq: map[uint64]map[[chain.HashSize]byte]uint64{}}
	o := clusterOpts{
		log: func(d *clusterDev, fl fwdLog) ChainLog { spy.fwdLog = fl; return spy },
		loop: func(d *clusterDev, cfg *LoopConfig) {
			cfg.Knobs = k
			cfg.MaxBatchCount = 16
		},
	}
	if mod != nil {
		mod(&o)
	}
	c := newSigClusterOpts(t, 1, o)
	waitFor(t, "a holder", func() bool { return c.holder() != nil && c.devs[0].loop.Holding() })
	return c, spy
}

func waitTickets(t *testing.T, ts ...*Ticket) []Outcome {
	t.Helper()
	out := make([]Outcome, len(ts))
	for i, tk := range ts {
		select {
		case <-tk.Done():
			out[i] = tk.Outcome()
		case <-time.After(10 * time.Second):
			t.Fatalf("submission %d not answered", i)
		}
	}
	return out
}

// TestLoopAddValidates: the loop's own entrance refuses what the apply would.
func TestLoopAddValidates(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	bad := intentlog.Intent{ID: "bad\u0001id", Op: intentlog.OpPut, Path: "app/b"}
	var ie *intentlog.IntentError
	if _, err := h.loop.Add(bad); !errors.As(err, &ie) || ie.Reason != intentlog.ReasonBadIntent {
		t.Fatalf("Add of %q: %v, want the apply's bad_intent", bad.ID, err)
	}
}

// TestContentRefusalDropsOnlyTheOffendingOps (issue 19.1, defence in depth): an
// invalid intent that reaches a commit (the SkipValidation knob stands for a missed
// entrance) gets that commit refused (bad_ops) once: the invalid intent is answered
// with the apply's reason and dropped, the valid ones in the same commit are signed
// in the next one (one bump, never a second commit for one (seq, epoch)), and the
// refusal is counted and reported as a defect. With the old behaviour
// (ResignRefused) the holder signs the same seq again and again.
func TestContentRefusalDropsOnlyTheOffendingOps(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "fixed"
		if old {
			name = "old-wedge"
		}
		t.Run(name, func(t *testing.T) {
			c, spy := spyCluster(t, &knobs.Signer{SkipValidation: true, ResignRefused: old}, nil)
			l := c.devs[0].loop
			// Hold the commit back until all three are queued: one commit carries them.
			gate := make(chan struct{})
			var once sync.Once
			spy.before = func(ctx context.Context, raw []byte) (intentlog.Result, error, bool) {
				once.Do(func() { <-gate })
				return intentlog.Result{}, nil, false
			}
			ins := intents(0, 3)
			ins[1].ID = "bad\u0001id"
			var ts []*Ticket
			for _, in := range ins {
				tk, err := l.Add(in)
				if err != nil {
					t.Fatal(err)
				}
				ts = append(ts, tk)
			}
			close(gate)
			if old {
				waitFor(t, "the old loop to sign one seq three times", func() bool { return l.Stats().CommitsRejected >= 3 })
				if most := spy.signedPerSeq(t); most < 3 {
					t.Fatalf("old behaviour: %d commits for one seq", most)
				}
				return
			}
			outs := waitTickets(t, ts...)
			var ie *intentlog.IntentError
			var re *RefusedError
			if !errors.As(outs[1].Err, &re) || re.Reason != intentlog.ReasonBadOps || !errors.As(outs[1].Err, &ie) ||
				ie.Reason != intentlog.ReasonBadIntent {
				t.Fatalf("the invalid intent: %+v, want refused (bad_ops) for bad_intent", outs[1])
			}
			for _, i := range []int{0, 2} {
				if outs[i].Err != nil || outs[i].Seq == 0 {
					t.Fatalf("valid intent %d: %+v", i, outs[i])
				}
			}
			st := l.Stats()
			if st.ContentRefused[intentlog.ReasonBadOps] != 1 || st.CommitsRejected != 1 || st.Bumps != 1 || st.SignedRefused != 1 {
				t.Fatalf("stats %+v", st)
			}
			if l.Defect() == nil || l.Unfit() != nil {
				t.Fatalf("defect %v, unfit %v", l.Defect(), l.Unfit())
			}
			if most := spy.signedPerSeq(t); most != 2 {
				t.Fatalf("%d commits for one seq, want 2 (refused, then the rest under the next epoch)", most)
			}
			if st, ok, _ := c.devs[0].log.IntentStatus(ins[1].ID); ok {
				t.Fatalf("the invalid intent is remembered: %+v", st)
			}
		})
	}
}

// TestContentRefusalBacklog: a commit whose carried ops do not fit the genesis's
// MaxIDs cap is refused (backlog): its carried ops are answered backlog and dropped,
// never signed again.
func TestContentRefusalBacklog(t *testing.T) {
	c, spy := spyCluster(t, nil, func(o *clusterOpts) {
		o.genesis = func(g *intentlog.GenesisEntry) { g.MaxIDs = 2 }
	})
	l := c.devs[0].loop
	for _, in := range intents(0, 2) {
		tk, err := l.Add(in)
		if err != nil {
			t.Fatal(err)
		}
		if o := waitTickets(t, tk)[0]; o.Err != nil {
			t.Fatal(o.Err)
		}
	}
	tk, err := l.Add(intents(2, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	o := waitTickets(t, tk)[0]
	var re *RefusedError
	if !errors.As(o.Err, &re) || re.Reason != intentlog.ReasonBacklog || !errors.Is(o.Err, ErrBacklog) {
		t.Fatalf("outcome %+v, want refused for backlog", o)
	}
	waitFor(t, "the refused commit voided", func() bool { return l.Stats().InFlight == 0 })
	st := l.Stats()
	if st.ContentRefused[intentlog.ReasonBacklog] != 1 || st.SignedRefused != 1 {
		t.Fatalf("stats %+v", st)
	}
	if most := spy.signedPerSeq(t); most != 1 {
		t.Fatalf("%d commits for one seq, want 1", most)
	}
}

// TestContentRefusalNoOpExplains: a refusal no carried op explains (here a leader
// whose state is not this replica's refuses a valid commit: the answer is faked)
// would be refused again whatever is signed: the loop signs once, then stops signing
// for good (Unfit) and gives the lease up, instead of claiming and signing again.
func TestContentRefusalNoOpExplains(t *testing.T) {
	c, spy := spyCluster(t, nil, nil)
	dev := c.devs[0]
	l := dev.loop
	spy.before = func(ctx context.Context, raw []byte) (intentlog.Result, error, bool) {
		v := dev.log.View()
		return intentlog.Result{Index: v.AppliedIndex, Reason: intentlog.ReasonBadOps, Lease: v.Lease, Head: v.Head}, nil, true
	}
	tk, err := l.Add(intents(0, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	o := waitTickets(t, tk)[0]
	if !errors.Is(o.Err, ErrNotHolder) {
		t.Fatalf("outcome %+v, want not_holder (signed by the next holder)", o)
	}
	waitFor(t, "unfit", func() bool { return l.Unfit() != nil })
	waitFor(t, "the lease given up", func() bool { return !dev.lease.Holds() })
	// It never claims again: two lease ticks later nothing more was signed.
	ticks := l.Stats().Ticks
	waitFor(t, "two more lease ticks", func() bool { return l.Stats().Ticks >= ticks+2 })
	if st := l.Stats(); st.CommitsSigned != 1 || st.ContentRefused[intentlog.ReasonBadOps] != 1 || dev.lease.Holds() {
		t.Fatalf("stats %+v, holds %v", st, dev.lease.Holds())
	}
	if most := spy.signedPerSeq(t); most != 1 {
		t.Fatalf("%d commits for one seq", most)
	}
}

// TestRefusalAtOrBelowHeadSettledLocally (issue 19.5): after a leader change the
// transport may resend a commit's bytes; the second copy is refused (bad_prev) after
// the first applied and the next commit too. That refusal is settled from the local
// chain: the commit counts as applied, and no divergence alarm is raised. With the
// old rule (TrustRefusal) the loop called it refused and raised a false alarm.
func TestRefusalAtOrBelowHeadSettledLocally(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(subtestName(old), func(t *testing.T) {
			l, dev, spy, alarms := falseAlarmCluster(t, old)
			var first sync.Once
			spy.before = func(ctx context.Context, raw []byte) (intentlog.Result, error, bool) {
				cm, _ := chain.Decode(raw)
				if cm.Seq != 1 {
					return intentlog.Result{}, nil, false
				}
				handled := false
				var res intentlog.Result
				var err error
				first.Do(func() {
					handled = true
					// The local replica lags: it shows neither copy until the loop
					// has taken the answer.
					defer spy.lagUntilAnswered(t, l, dev)()
					// The first copy applies; the next commit applies after it; the
					// answer the loop gets is the resent copy's.
					if res, err = spy.fwdLog.Propose(ctx, intentlog.CommitEntry{Raw: raw}); err != nil || !res.Accepted {
						return
					}
					waitHead(ctx, dev, 2)
					res, err = spy.fwdLog.Propose(context.WithoutCancel(ctx), intentlog.CommitEntry{Raw: raw})
				})
				return res, err, handled
			}
			outs := waitTickets(t, addAll(t, l, intents(0, 2))...)
			if !checkAlarms(t, l, old, alarms, outs) {
				return
			}
			if st := l.Stats(); st.CommitsRejected != 0 || st.SignedRefused != 0 || st.Bumps != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestRefusalBehindHeadThenAppliedNoFalseAlarm (issue 19.5, the simulator's seeds
// 341617 and 363209): a copy of seq 2 reaches the log before seq 1 and is refused with
// the head behind its prev; seq 1 applies, then another copy of seq 2 applies. The loop
// is told "refused", and its replica then applies the commit: not a divergence, since
// the entry that applied it is not the one that refused it. Main raised the alarm (the
// old rule is kept behind TrustRefusal, which the simulator's knob uses).
func TestRefusalBehindHeadThenAppliedNoFalseAlarm(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(subtestName(old), func(t *testing.T) {
			l, dev, spy, alarms := falseAlarmCluster(t, old)
			refusedA := make(chan struct{})
			var firstOne, firstTwo sync.Once
			var copyA, copyB intentlog.Result
			spy.before = func(ctx context.Context, raw []byte) (intentlog.Result, error, bool) {
				cm, _ := chain.Decode(raw)
				handled := false
				var res intentlog.Result
				var err error
				switch cm.Seq {
				case 1:
					firstOne.Do(func() {
						handled = true
						// Let the loop go on to seq 2 (an entry of this proposal is
						// queued), but keep seq 1 out of the log until a copy of seq 2
						// has been refused. The entry queued is one the apply refuses
						// (nothing pending for the loop to sign).
						filler := intentlog.IntentsEntry{Intents: []intentlog.Intent{{ID: "filler\u0001", Op: intentlog.OpPut, Path: "app.test/filler"}}}
						if _, err = spy.fwdLog.Propose(ctx, filler); err != nil {
							return
						}
						select {
						case <-refusedA:
						case <-ctx.Done():
							err = ctx.Err()
							return
						}
						res, err = spy.fwdLog.Propose(ctx, intentlog.CommitEntry{Raw: raw})
					})
				case 2:
					firstTwo.Do(func() {
						handled = true
						defer spy.lagUntilAnswered(t, l, dev)() // the loop sees its replica only after the answer
						if copyA, err = spy.fwdLog.Propose(ctx, intentlog.CommitEntry{Raw: raw}); err != nil {
							return
						}
						close(refusedA)
						waitHead(ctx, dev, 1)
						// A copy the transport resent applies after seq 1.
						copyB, _ = spy.fwdLog.Propose(context.WithoutCancel(ctx), intentlog.CommitEntry{Raw: raw})
						res = copyA
					})
				}
				return res, err, handled
			}
			outs := waitTickets(t, addAll(t, l, intents(0, 2))...)
			if copyA.Accepted || copyA.Head.Seq >= 1 || !copyB.Accepted {
				t.Fatalf("the order did not happen: copy A %+v, copy B %+v", copyA, copyB)
			}
			if !checkAlarms(t, l, old, alarms, outs) {
				return
			}
			if st := l.Stats(); st.CommitsRejected != 1 || st.SettledLocally != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// falseAlarmCluster is the setup of the false-alarm tests: one device signing one
// commit per intent, its divergence alarms counted, the old rule (TrustRefusal) when
// old.
func falseAlarmCluster(t *testing.T, old bool) (*Loop, *clusterDev, *commitSpy, *atomic.Int32) {
	t.Helper()
	alarms := new(atomic.Int32)
	c, spy := spyCluster(t, &knobs.Signer{TrustRefusal: old}, func(o *clusterOpts) {
		inner := o.loop
		o.loop = func(d *clusterDev, cfg *LoopConfig) {
			inner(d, cfg)
			cfg.MaxBatchCount = 1 // one commit per intent
			cfg.MaxInFlight = 8   // several in flight: a later one can apply before a resent copy
			cfg.Diverged = func(error) { alarms.Add(1) }
		}
	})
	return c.devs[0].loop, c.devs[0], spy, alarms
}

// lagUntilAnswered makes the loop see its replica as it is now until the loop has
// taken the answer the caller is about to return (two more steps): a local replica
// that lags. It returns the function to defer.
func (s *commitSpy) lagUntilAnswered(t *testing.T, l *Loop, dev *clusterDev) func() {
	v := dev.log.View()
	s.frozen.Store(&v)
	done := t.Context() // the test's end, not a deadline a loaded machine may miss
	return func() {
		steps := l.Stats().Steps
		go func() {
			for l.Stats().Steps <= steps+1 && done.Err() == nil {
				<-time.After(time.Millisecond) // polling interval, not synchronisation
			}
			s.frozen.Store(nil)
			l.Wake()
		}()
	}
}

// waitHead waits until dev's replica has applied seq (or ctx ends).
func waitHead(ctx context.Context, dev *clusterDev, seq uint64) {
	for dev.log.View().Head.Seq < seq && ctx.Err() == nil {
		w := dev.log.Watch()
		if dev.log.View().Head.Seq >= seq {
			break
		}
		select {
		case <-w:
		case <-ctx.Done():
		}
	}
}

func subtestName(old bool) string {
	if old {
		return "old-false-alarm"
	}
	return "fixed"
}

// checkAlarms waits for the commits to settle; with the old rule it waits for the
// false alarm and reports false (nothing more to check), else it checks that the
// submissions got seqs 1, 2, ... and that no alarm was raised.
func checkAlarms(t *testing.T, l *Loop, old bool, alarms *atomic.Int32, outs []Outcome) bool {
	t.Helper()
	waitFor(t, "the commits settled", func() bool { return l.Stats().InFlight == 0 && l.Stats().Steps > 0 })
	if old {
		waitFor(t, "the old false alarm", func() bool { return alarms.Load() > 0 })
		return false
	}
	for i, o := range outs {
		if o.Err != nil || o.Seq != uint64(i+1) {
			t.Fatalf("outcome %d: %+v", i, o)
		}
	}
	if n := alarms.Load(); n != 0 {
		t.Fatalf("%d divergence alarms on a healthy replica", n)
	}
	return true
}

// addAll hands ins to the loop and returns their tickets.
func addAll(t *testing.T, l *Loop, ins []intentlog.Intent) []*Ticket {
	t.Helper()
	ts := make([]*Ticket, 0, len(ins))
	for _, in := range ins {
		tk, err := l.Add(in)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tk)
	}
	return ts
}

// One commit in flight by default (issue 23): while a commit has not applied on the
// local replica, submissions wait at the holder and go into the next commit together.
// With the pipeline depth before (8) the loop signs a second commit on the predicted
// head at once. The local replica is held back (a frozen view) so that the first
// commit stays in flight as long as the test needs.
func TestLoopOneCommitInFlightByDefault(t *testing.T) {
	c, spy := spyCluster(t, nil, nil)
	l := c.devs[0].loop
	v := spy.View()
	spy.frozen.Store(&v)
	first, err := l.Add(intents(0, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first commit applied in the log", func() bool { return spy.fwdLog.View().Head.Seq == 1 })
	var rest []*Ticket
	for _, in := range intents(1, 4) {
		tk, err := l.Add(in)
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, tk)
	}
	// Two more steps after the submissions: either of them would sign a second commit
	// if the loop had room for it.
	for range 2 {
		steps := l.Stats().Steps
		l.Wake()
		waitFor(t, "a signer step", func() bool { return l.Stats().Steps > steps })
	}
	if st := l.Stats(); st.CommitsProposed != 1 || st.Queued != 4 {
		t.Fatalf("with the first commit in flight: %d commits proposed, %d submissions queued; want 1 and 4", st.CommitsProposed, st.Queued)
	}
	spy.frozen.Store(nil)
	l.Wake()
	outs := waitTickets(t, append([]*Ticket{first}, rest...)...)
	for i, o := range outs {
		if o.Err != nil {
			t.Fatalf("submission %d: %v", i, o.Err)
		}
	}
	if outs[1].Seq != 2 || outs[4].Seq != 2 || l.Stats().CommitsProposed != 2 {
		t.Fatalf("the four later submissions in seq %d..%d, %d commits proposed; want all in seq 2, 2 commits", outs[1].Seq, outs[4].Seq, l.Stats().CommitsProposed)
	}
}
