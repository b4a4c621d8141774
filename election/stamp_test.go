package election

import (
	"testing"
	"time"
)

// A holder whose wall clock steps two hours ahead during its hold stops signing (its
// own window, measured by the larger of both clocks, is over) and re-claims; the
// re-claim is stamped at the hold's own pace, not two hours ahead, and the device says
// so in its stats (issue 19, item 2).
func TestStampClampsAClockThatStepsAhead(t *testing.T) {
	c := newCluster("a", "b")
	a := newDev(t, c, "a")
	mustClaim(t, a)
	claimTS := c.record().TS
	a.clk.Advance(lTTL / 2)
	if _, err := a.l.Renew(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got, want := c.record().TS, claimTS+(lTTL/2).Milliseconds(); got != want {
		t.Fatalf("renewal on a sane clock: ts %d, want %d", got, want)
	}
	if got, want := a.l.Stamp(), claimTS+(lTTL/2).Milliseconds(); got != want {
		t.Fatalf("commit stamp on a sane clock: %d, want %d", got, want)
	}
	if s := a.l.Stats(); s.ClockAhead != 0 {
		t.Fatalf("clamped a sane clock: %+v", s.LastClockAhead)
	}
	// The wall clock steps two hours ahead (monotonic unaffected).
	a.clk.AdvanceWall(2 * time.Hour)
	a.clk.Advance(time.Second)
	want := claimTS + (lTTL/2 + time.Second).Milliseconds()
	if got := a.l.Stamp(); got != want {
		t.Fatalf("commit stamp after the step: %d, want %d (the hold's pace)", got, want)
	}
	if _, err := a.l.RenewOrClaim(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if rec := c.record(); rec.Holder != "a" || rec.TS != want {
		t.Fatalf("re-claim after the step: %+v, want ts %d (the hold's pace)", rec, want)
	}
	s := a.l.Stats()
	if s.ClockAhead == 0 || s.LastClockAhead.By < 2*time.Hour-time.Second {
		t.Fatalf("no report of the clock ahead: %+v", s)
	}
}

// A device whose clock is two hours ahead of the record it saw being written claims,
// once the record lapses, at the record's pace (plus at most one TTL), not two hours
// ahead.
func TestStampClampsAClaimFarAheadOfTheRecord(t *testing.T) {
	c := newCluster("a", "b")
	a, b := newDev(t, c, "a"), newDev(t, c, "b")
	b.clk.SetSkew(2 * time.Hour)
	b.l.Current() // b sees the empty record
	mustClaim(t, a)
	recTS := c.record().TS
	b.l.Current() // b sees a's claim replace it
	for range 4 { // a dies; b observes the record for two TTLs
		b.clk.Advance(lTTL / 2)
		b.l.Current()
	}
	if _, err := b.l.Claim(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	rec := c.record()
	if rec.Holder != "b" || rec.TS > recTS+(3*lTTL).Milliseconds() {
		t.Fatalf("claim by a clock 2 h ahead: %+v (record ts was %d)", rec, recTS)
	}
	if s := b.l.Stats(); s.ClockAhead != 1 {
		t.Fatalf("clock ahead not reported: %+v", s)
	}
}
