package election

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
)

const (
	pTTL = 10 * time.Second
	ms   = time.Millisecond
)

var (
	pol   = Policy{TTL: pTTL, SignFraction: 2.0 / 3.0}
	wall0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mono0 = 5 * time.Hour
)

// foreign builds an input where device "b" looks at "a"'s record written at wall time
// ts, first observed `observed` ago, with this device's wall clock at wall0.
func foreign(tsAgo, observed time.Duration) Input {
	return Input{
		Record:    intentlog.Lease{Holder: "a", Epoch: 7, TS: wall0.Add(-tsAgo).UnixMilli(), TTL: pTTL.Milliseconds()},
		Self:      "b",
		Now:       wall0,
		Mono:      mono0,
		FirstSeen: mono0 - observed,
		EverHeld:  true,
	}
}

// own builds an input where "a" looks at its own record, having proposed its last
// successful write monoSince (monotonic) and wallSince (wall) ago.
func own(monoSince, wallSince time.Duration) Input {
	return Input{
		Record:    intentlog.Lease{Holder: "a", Epoch: 7, TS: wall0.Add(-wallSince).UnixMilli(), TTL: pTTL.Milliseconds()},
		Self:      "a",
		Now:       wall0,
		Mono:      mono0,
		FirstSeen: mono0 - monoSince,
		Own:       OwnWrite{Valid: true, Mono: mono0 - monoSince, Wall: wall0.Add(-wallSince)},
		EverHeld:  true,
	}
}

func TestPolicyDecide(t *testing.T) {
	type want struct {
		action  Action
		why     Why
		maySign bool
		skew    bool
		wakeIn  time.Duration // Wake - Mono
	}
	vacant := Input{Self: "b", Now: wall0, Mono: mono0, FirstSeen: mono0}
	released := foreign(time.Hour, 0)
	released.Record.Holder = ""
	standing := released
	standing.Standoff = mono0 + 3*time.Second
	shortTTL := foreign(4*time.Second, 4*time.Second)
	shortTTL.Record.TTL = 4000
	noTTL := foreign(pTTL, pTTL)
	noTTL.Record.TTL = 0

	adoptBoot := foreign(time.Second, 0)
	adoptBoot.Self, adoptBoot.Record.Holder, adoptBoot.EverHeld = "a", "a", false
	adoptTransfer := adoptBoot
	adoptTransfer.EverHeld = true
	adoptTransfer.Previous, adoptTransfer.HavePrevious = intentlog.Lease{Holder: "x", Epoch: 6}, true
	twin := adoptTransfer
	twin.Previous = intentlog.Lease{Holder: "a", Epoch: 6}
	afterRelease := adoptTransfer
	afterRelease.Previous = intentlog.Lease{Holder: "", Epoch: 6}
	farTransfer := adoptTransfer
	farTransfer.Previous = intentlog.Lease{Holder: "x", Epoch: 5}
	twinLapsed := twin
	twinLapsed.FirstSeen = mono0 - pTTL
	twinLapsed.Record.TS = wall0.Add(-pTTL).UnixMilli()
	adoptStandoff := adoptBoot
	adoptStandoff.Standoff = mono0 + time.Second
	transferStandoff := adoptTransfer
	transferStandoff.Standoff = mono0 + time.Second

	suspended := own(time.Second, 7*time.Second) // monotonic stood still while asleep
	wallBack := own(time.Second, -time.Hour)     // wall clock stepped back an hour

	cases := []struct {
		name string
		in   Input
		want want
	}{
		{"vacant: claim at once", vacant, want{Claim, WhyVacant, false, false, 0}},
		{"released: claim at once", released, want{Claim, WhyReleased, false, false, 0}},
		{"released while standing off: wait", standing, want{Wait, WhyStandoff, false, false, 3 * time.Second}},

		{"foreign, just booted, wall says long dead: observed guard waits", foreign(time.Hour, 0), want{Wait, WhyLive, false, false, pTTL}},
		{"foreign, observed ttl-1ms: wait", foreign(time.Hour, pTTL-ms), want{Wait, WhyLive, false, false, ms}},
		{"foreign, observed exactly ttl, wall exactly ttl: lapsed", foreign(pTTL, pTTL), want{Claim, WhyLapsed, false, false, 0}},
		{"foreign, observed ttl, wall ttl-1ms: skew wait until wall agrees", foreign(pTTL-ms, pTTL), want{Wait, WhySkew, false, true, ms}},
		{"foreign, holder clock ahead by ttl: skew wait until 2ttl", foreign(-pTTL, pTTL), want{Wait, WhySkew, false, true, pTTL}},
		{"foreign, observed 2ttl-1ms, clock ahead: still wait", foreign(-pTTL, 2*pTTL-ms), want{Wait, WhySkew, false, true, ms}},
		{"foreign, observed exactly 2ttl, clock ahead: lapsed, skew reported", foreign(-pTTL, 2*pTTL), want{Claim, WhyLapsedSkew, false, true, 0}},
		{"foreign, record ttl 4s used over policy ttl", shortTTL, want{Claim, WhyLapsed, false, false, 0}},
		{"foreign, record without ttl falls back to policy ttl", noTTL, want{Claim, WhyLapsed, false, false, 0}},

		{"own, just written: hold", own(0, 0), want{Hold, WhyFresh, true, false, pTTL / 2}},
		{"own, ttl/2-1ms: hold", own(pTTL/2-ms, pTTL/2-ms), want{Hold, WhyFresh, true, false, ms}},
		{"own, exactly ttl/2: renew", own(pTTL/2, pTTL/2), want{Renew, WhyRenewDue, true, false, 0}},
		{"own, 2/3 ttl - 1ms: renew, may still sign", own(pTTL*2/3-ms, pTTL*2/3-ms), want{Renew, WhyRenewDue, true, false, 0}},
		{"own, exactly 2/3 ttl: window over, compete for epoch+1", own(pTTL*2/3, pTTL*2/3), want{Claim, WhyOwnLapsed, false, false, 0}},
		{"own, ttl-1ms: compete for epoch+1", own(pTTL-ms, pTTL-ms), want{Claim, WhyOwnLapsed, false, false, 0}},
		{"own, exactly ttl: compete for epoch+1", own(pTTL, pTTL), want{Claim, WhyOwnLapsed, false, false, 0}},
		{"own, suspended: wall elapsed counts", suspended, want{Claim, WhyOwnLapsed, false, false, 0}},
		{"own, wall stepped back: monotonic counts", wallBack, want{Hold, WhyFresh, true, false, pTTL/2 - time.Second}},

		{"own id, no memory, fresh process: adopt by claim", adoptBoot, want{Claim, WhyAdopt, false, false, 0}},
		{"own id, no memory, transferred from x at epoch-1: adopt", adoptTransfer, want{Claim, WhyAdopt, false, false, 0}},
		{"own id, no memory, previous was ours (twin): wait it out", twin, want{Wait, WhyLive, false, false, pTTL}},
		{"own id, no memory, previous was released: wait it out", afterRelease, want{Wait, WhyLive, false, false, pTTL}},
		{"own id, no memory, previous two epochs back: wait it out", farTransfer, want{Wait, WhyLive, false, false, pTTL}},
		{"own id, no memory, twin record lapsed: claim", twinLapsed, want{Claim, WhyLapsed, false, false, 0}},
		{"own id, adopt while standing off: wait", adoptStandoff, want{Wait, WhyStandoff, false, false, time.Second}},
		{"own id, transferred to us while standing off: adopt at once", transferStandoff, want{Claim, WhyAdopt, false, false, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := pol.Decide(tc.in)
			got := want{d.Action, d.Why, d.MaySign, d.SuspectedSkew, d.Wake - tc.in.Mono}
			if got != tc.want {
				t.Fatalf("Decide = %+v\nwant      %+v\n(decision %+v)", got, tc.want, d)
			}
			if d.Holding() != (d.MaySign && (d.Action == Hold || d.Action == Renew)) {
				t.Fatalf("Holding() inconsistent: %+v", d)
			}
			if again := pol.Decide(tc.in); again != d {
				t.Fatalf("Decide is not a pure function: %+v then %+v", d, again)
			}
		})
	}
}

func TestPolicySignWindow(t *testing.T) {
	for _, f := range []float64{0.51, 2.0 / 3.0, 0.75, 0.9} {
		p := Policy{TTL: pTTL, SignFraction: f}
		window := time.Duration(f * float64(pTTL))
		in := own(time.Second, time.Second)
		d := p.Decide(in)
		if !d.MaySign || d.SignUntil != in.Mono+window-time.Second {
			t.Fatalf("f=%v: MaySign %v SignUntil %v, want until %v", f, d.MaySign, d.SignUntil-in.Mono, window-time.Second)
		}
		if d := p.Decide(own(window, window)); d.MaySign {
			t.Fatalf("f=%v: may sign at exactly the window", f)
		}
		if d := p.Decide(own(window-ms, window-ms)); !d.MaySign {
			t.Fatalf("f=%v: may not sign 1ms before the window", f)
		}
	}
}

// A live holder renews every ttl/2, so an observer never sees one record for a full
// TTL; whatever the wall clocks say (holder or observer skewed by up to a TTL either
// way), the observer never claims.
func TestPolicySkewNeverClaimsLiveLease(t *testing.T) {
	for _, skew := range []time.Duration{-pTTL, -pTTL / 2, -ms, 0, ms, pTTL / 2, pTTL, 3 * pTTL} {
		for observed := time.Duration(0); observed < pTTL; observed += 250 * ms {
			// The record was written `observed` ago in real time by a holder whose
			// clock differs from ours by skew.
			in := foreign(observed-skew, observed)
			d := pol.Decide(in)
			if d.Action == Claim || d.Holding() {
				t.Fatalf("skew %v observed %v: %v (%s): claimed a live lease", skew, observed, d.Action, d.Why)
			}
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Policy
		ok bool
	}{
		{DefaultPolicy(), true},
		{Policy{TTL: ms, SignFraction: 0.6}, true},
		{Policy{TTL: pTTL, SignFraction: 0.9}, true},
		{Policy{TTL: 0, SignFraction: 0.6}, false},
		{Policy{TTL: -time.Second, SignFraction: 0.6}, false},
		{Policy{TTL: 1500 * time.Microsecond, SignFraction: 0.6}, false},
		{Policy{TTL: pTTL, SignFraction: 0.5}, false},
		{Policy{TTL: pTTL, SignFraction: 0.91}, false},
		{Policy{TTL: pTTL, SignFraction: 1}, false},
		{Policy{TTL: pTTL, SignFraction: 0}, false},
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.p.TTL, tc.p.SignFraction), func(t *testing.T) {
			err := tc.p.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadOptions) {
				t.Fatalf("error %v is not ErrBadOptions", err)
			}
		})
	}
}

func TestActionString(t *testing.T) {
	for a, s := range map[Action]string{Wait: "wait", Hold: "hold", Renew: "renew", Claim: "claim", Action(9): "action(9)"} {
		if a.String() != s {
			t.Fatalf("%d.String() = %q, want %q", a, a.String(), s)
		}
	}
}
