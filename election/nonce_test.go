package election

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/intentlog"
)

// Issue 38 item 6: a claim was known by (epoch, ts), and ts (the wall clock in unix ms)
// repeats across a restart within one millisecond. A restarted process a#2 decides to
// claim epoch 1 on the same record, at the same millisecond, as the earlier process
// a#1 of the same device; a#1's claim lands while a#2's is in flight, and a#2's
// proposal ends without an answer. The record then shows (a, epoch 1, ts) and a#2 took
// it for its own claim: it held and would sign under epoch 1, beside whatever a#1
// signed under it (two commits for one seq at one epoch). A write is now known by its
// process too (the claim's nonce, kept in the record): a#2 does not hold epoch 1 and
// claims epoch 2 instead, which fences everything a#1 signed.
func TestRestartedClaimWithSameTSIsNotOwn(t *testing.T) {
	c := newCluster("a")
	a1 := newDevOn(t, c, "a", "a#1", nil)
	a2 := newDevOn(t, c, "a", "a#2", nil) // same millisecond: both clocks read t0
	c.intercept = func(ctx context.Context, from string, e intentlog.Entry) (bool, error) {
		if from != "a#2" {
			return true, nil
		}
		c.mu.Lock()
		c.intercept = nil // only a#2's first claim (the hook runs outside c.mu)
		c.mu.Unlock()
		// a#1's claim, decided on the same record at the same millisecond, lands
		// first; a#2's claim then loses the CAS, and its answer is lost.
		if got := mustClaim(t, a1); got != 1 {
			t.Errorf("a#1 claimed epoch %d", got)
		}
		return false, context.DeadlineExceeded
	}
	if _, err := a2.l.Claim(ctxT(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a#2: claim error %v, want the unknown outcome", err)
	}
	rec := c.record()
	if rec.Holder != "a" || rec.Epoch != 1 || rec.TS != t0.UnixMilli() {
		t.Fatalf("record %+v, want a#1's claim of epoch 1 at t0", rec)
	}
	if a2.l.Holds() || a2.l.Epoch() != 0 {
		t.Fatalf("a#2 holds epoch %d, claimed by a#1 (another process of the device)", a2.l.Epoch())
	}
	if d := a2.l.Decide(); d.Action != Claim || d.Why != WhyAdopt {
		t.Fatalf("a#2 decides %+v, want a claim of the record it did not write (adopt)", d)
	}
	if held := step(t, 0, a2); !held["a#2"] || a2.l.Epoch() != 2 {
		t.Fatalf("a#2 after its tick: held %v at epoch %d, want epoch 2", held, a2.l.Epoch())
	}
	if a1.l.Holds() {
		t.Fatal("a#1 still holds after a#2 claimed epoch 2")
	}
}
