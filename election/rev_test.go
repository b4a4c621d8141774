package election

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
)

// lateRenewal plays the interleaving the record revision exists for. Standby b
// observes holder a's record R unchanged for a TTL (a's renewal is slow to commit),
// syncs, and decides to claim. a's renewal, proposed inside its window, lands after
// b's sync but before b's claim. a's replica has not applied b's claim when the run
// ends (frozen). It returns the claim's outcome and who believes it holds.
func lateRenewal(t *testing.T, k knobs.Intentlog) (claimErr error, aHolds, bHolds bool, c *cluster) {
	t.Helper()
	c = newCluster("a", "b")
	c.knobs = k
	a := newDev(t, c, "a")
	mustClaim(t, a)
	var sl *syncLog
	b := newDevOn(t, c, "b", "b", func(f *fakeLog) Log { sl = &syncLog{fakeLog: f}; return sl })

	renewArrived, releaseRenew, renewDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	c.intercept = func(ctx context.Context, from string, e intentlog.Entry) (bool, error) {
		switch e.(type) {
		case intentlog.RenewEntry:
			close(renewArrived)
			select { // a's renewal is slow to commit
			case <-releaseRenew:
			case <-ctx.Done():
				return false, ctx.Err()
			}
		case intentlog.ClaimEntry:
			if from != "b" {
				break
			}
			// b has synced and decided; now a's renewal lands, before b's claim.
			close(releaseRenew)
			if err := <-renewDone; err != nil {
				t.Errorf("a's renewal: %v", err)
			}
		}
		return true, nil
	}

	// a renews inside its window (past ttl/2, before 2/3 ttl).
	a.clk.Advance(lTTL * 6 / 10)
	b.clk.Advance(lTTL * 6 / 10)
	go func() {
		held, err := a.l.Renew(ctxT(t))
		if err == nil && !held {
			err = errors.New("renewal accepted but a does not hold")
		}
		a.log.freeze() // a's replica stops here: it will not see b's claim
		renewDone <- err
	}()
	<-renewArrived
	// Time passes while the renewal is in flight: b sees R unchanged for a TTL by
	// both clocks.
	a.clk.Advance(lTTL * 4 / 10)
	b.clk.Advance(lTTL * 4 / 10)
	if d := b.l.Decide(); d.Action != Claim || d.Why != WhyLapsed {
		t.Fatalf("b's decision %+v (test premise: R looks lapsed)", d)
	}
	_, claimErr = b.l.Claim(ctxT(t))
	if sl.syncs != 1 {
		t.Fatalf("b synced %d times before claiming, want 1", sl.syncs)
	}
	return claimErr, a.l.Holds(), b.l.Holds(), c
}

// DESIGN, Claim: a renewal applied after the claimant looked makes the claim lose, so
// the late-renewal interleaving ends with exactly one device holding.
func TestLateRenewalMakesClaimLose(t *testing.T) {
	claimErr, aHolds, bHolds, c := lateRenewal(t, knobs.Intentlog{})
	var re *RejectedError
	if !errors.Is(claimErr, ErrLostRace) || !errors.As(claimErr, &re) || re.Reason != intentlog.ReasonStaleRev {
		t.Fatalf("b's claim: %v, want ErrLostRace (stale_rev)", claimErr)
	}
	if !aHolds || bHolds {
		t.Fatalf("a holds %v, b holds %v: want exactly a", aHolds, bHolds)
	}
	if rec := c.record(); rec.Holder != "a" || rec.Epoch != 1 {
		t.Fatalf("record %+v", rec)
	}
}

// The EpochOnlyClaim knob brings the bug back: the same interleaving leaves both
// devices believing they hold (the apply's commit fencing still keeps the chain
// fork-free; a's commits would be refused). This is the knob's own test.
func TestKnobEpochOnlyClaimLateRenewalSplitBrain(t *testing.T) {
	claimErr, aHolds, bHolds, c := lateRenewal(t, knobs.Intentlog{EpochOnlyClaim: true})
	if claimErr != nil {
		t.Fatalf("b's claim with the knob: %v", claimErr)
	}
	if !aHolds || !bHolds {
		t.Fatalf("a holds %v, b holds %v: with the knob both should believe they hold", aHolds, bHolds)
	}
	if rec := c.record(); rec.Holder != "b" || rec.Epoch != 2 {
		t.Fatalf("record %+v", rec)
	}
}

// A renewal refused with stale_rev while the record still names this device at the same
// epoch is not a lost lease: a's earlier renewal (outcome unknown) was applied, but a's
// replica has not applied it yet, so a's next renewal names an old revision.
func TestStaleRevRenewalIsNotALostLease(t *testing.T) {
	c := newCluster("a")
	a := newDev(t, c, "a")
	mustClaim(t, a)
	lost := a.l.Lost()
	// a's replica stops applying (gated: its own proposals do not catch it up).
	a.log.freeze()
	a.log.mu.Lock()
	a.log.gate = make(chan struct{})
	a.log.mu.Unlock()
	c.intercept = func(context.Context, string, intentlog.Entry) (bool, error) {
		return true, context.DeadlineExceeded // applied, but a never hears back
	}
	a.clk.Advance(lTTL / 2)
	if _, err := a.l.Renew(ctxT(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first renewal: %v", err)
	}
	c.intercept = nil
	a.clk.Advance(lTTL / 20)
	held, err := a.l.Renew(ctxT(t))
	var re *RejectedError
	if !errors.Is(err, ErrStaleRecord) || errors.Is(err, ErrNotHolder) || !errors.As(err, &re) || re.Reason != intentlog.ReasonStaleRev {
		t.Fatalf("second renewal: %v, want ErrStaleRecord (stale_rev)", err)
	}
	if !held || !a.l.Holds() || closed(lost) {
		t.Fatal("a stale_rev renewal ended the hold")
	}
	if held, err := a.l.RenewOrClaim(ctxT(t)); !held || err != nil {
		t.Fatalf("tick after a stale_rev renewal: %v %v (a normal outcome, not an error)", held, err)
	}
	// The window still bounds signing: counted from the claim, a cannot know yet that
	// its first renewal landed.
	a.clk.Advance(lTTL*2/3 - lTTL/2 - lTTL/20)
	if a.l.Holds() {
		t.Fatal("holds past the window of the last write it knows of")
	}
	// Its replica catches up: the record shows a's first renewal, which a remembers,
	// so the window counts from that renewal's proposal and the next renewal succeeds.
	a.log.mu.Lock()
	a.log.gate = nil
	a.log.mu.Unlock()
	a.log.thaw()
	if !a.l.Holds() {
		t.Fatal("a does not hold on its own applied renewal")
	}
	a.clk.Advance(lTTL / 20)
	if held, err := a.l.Renew(ctxT(t)); !held || err != nil {
		t.Fatalf("renewal after catching up: %v %v", held, err)
	}
	if s := a.l.Stats(); s.Rejections[intentlog.ReasonStaleRev] < 1 || s.HoldsEnded != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A renewal proposed again while the wall clock is behind the record (ts would be the
// record's ts + 1 both times, the same bytes) gets a ts of its own, so the record
// tells which copy landed: if the first lands, late, the hold counts from its
// proposal, not from the second's. Counting from the second kept a signing for up to the time
// between them after standbys (which count from their first sight of the record)
// could claim (the simulator's seed 4634: a late forward of a renewal, duplicated
// messages and a clock step back).
func TestRepeatedRenewalCountsFromItsFirstProposal(t *testing.T) {
	c := newCluster("a")
	a := newDev(t, c, "a")
	mustClaim(t, a)
	a.clk.AdvanceWall(-lTTL) // ts = record ts + 1 for every renewal until the record changes
	a.log.freeze()
	a.log.mu.Lock()
	a.log.gate = make(chan struct{})
	a.log.mu.Unlock()
	first := true
	c.intercept = func(context.Context, string, intentlog.Entry) (bool, error) {
		if first {
			first = false
			return true, context.DeadlineExceeded // the first lands; a never hears back
		}
		return false, context.DeadlineExceeded // the second (same bytes) does not
	}
	a.clk.Advance(lTTL / 2)
	if _, err := a.l.Renew(ctxT(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first renewal: %v", err)
	}
	second := lTTL / 10
	a.clk.Advance(second)
	if _, err := a.l.Renew(ctxT(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second renewal: %v", err)
	}
	c.intercept = nil
	// a's replica applies the first renewal.
	a.log.mu.Lock()
	a.log.gate = nil
	a.log.mu.Unlock()
	a.log.thaw()
	if !a.l.Holds() {
		t.Fatal("a does not hold on its applied renewal")
	}
	// The may-sign window (2/3 TTL) counted from the first proposal has passed; from
	// the second it has not.
	a.clk.Advance(lTTL*2/3 - second + second/2)
	if a.l.Holds() {
		t.Fatal("holds past the window of the renewal that landed (counted from its repeat)")
	}
}
