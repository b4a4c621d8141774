package election

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
)

func TestCheckTiming(t *testing.T) {
	ok := []struct{ ttl, tick, propose time.Duration }{
		{15 * time.Second, time.Second, 5 * time.Second},
		{15 * time.Second, 5 * time.Second, 5 * time.Second}, // exactly a third
		{3 * time.Second, 100 * time.Millisecond, time.Second},
	}
	for _, c := range ok {
		if err := CheckTiming(c.ttl, c.tick, c.propose); err != nil {
			t.Errorf("CheckTiming(%v, %v, %v) = %v", c.ttl, c.tick, c.propose, err)
		}
	}
	bad := []struct {
		ttl, tick, propose time.Duration
		says               []string
	}{
		{15 * time.Second, 6 * time.Second, time.Second, []string{"tick 6s", "ttl 15s", "5s"}},
		{15 * time.Second, time.Second, 5001 * time.Millisecond, []string{"proposal timeout 5.001s", "ttl 15s"}},
		{0, time.Second, time.Second, []string{"ttl 0s"}},
		{15 * time.Second, 0, time.Second, []string{"tick 0s"}},
		{15 * time.Second, time.Second, -time.Second, []string{"proposal timeout -1s"}},
	}
	for _, c := range bad {
		err := CheckTiming(c.ttl, c.tick, c.propose)
		if !errors.Is(err, ErrBadOptions) {
			t.Errorf("CheckTiming(%v, %v, %v) = %v, want ErrBadOptions", c.ttl, c.tick, c.propose, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("CheckTiming(%v, %v, %v): %q does not name %q", c.ttl, c.tick, c.propose, err, s)
			}
		}
	}
}

// Decision.ExpiresIn is the lease's end as this device's policy sees it: for another
// holder when this device may claim, for its own hold when the may-sign window closes.
func TestDecisionExpiresIn(t *testing.T) {
	p := Policy{TTL: 10 * time.Second, SignFraction: 2.0 / 3.0}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mono := time.Hour
	rec := func(holder string, tsAgo time.Duration) intentlog.Lease {
		return intentlog.Lease{Holder: holder, Epoch: 3, TS: now.Add(-tsAgo).UnixMilli(), TTL: 10000, Rev: 9}
	}
	cases := []struct {
		name string
		in   Input
		want time.Duration
	}{
		{"other, observed 4s, wall 4s", Input{Record: rec("b", 4*time.Second), FirstSeen: mono - 4*time.Second}, 6 * time.Second},
		// Observed for a moment only, but the wall says 9s old: the observation guard decides.
		{"other, fresh observation", Input{Record: rec("b", 9*time.Second), FirstSeen: mono - time.Second}, 9 * time.Second},
		// The wall says 1s old though observed 8s: the wall agrees after 9 more seconds,
		// but after 2*ttl observed (12s from now) it is lapsed regardless: min(9s, 12s).
		{"other, skewed ahead", Input{Record: rec("b", time.Second), FirstSeen: mono - 8*time.Second}, 9 * time.Second},
		{"other, skewed far ahead", Input{Record: rec("b", -time.Hour), FirstSeen: mono - 8*time.Second}, 12 * time.Second},
		{"other, lapsed", Input{Record: rec("b", 11*time.Second), FirstSeen: mono - 11*time.Second}, 0},
		{"own, 2s after the write", Input{Record: rec("a", 2*time.Second), FirstSeen: mono - 2*time.Second,
			Own: OwnWrite{Valid: true, Mono: mono - 2*time.Second, Wall: now.Add(-2 * time.Second)}}, 10*time.Second*2/3 - 2*time.Second},
		{"own, window closed", Input{Record: rec("a", 7*time.Second), FirstSeen: mono - 7*time.Second,
			Own: OwnWrite{Valid: true, Mono: mono - 7*time.Second, Wall: now.Add(-7 * time.Second)}}, 0},
		{"released", Input{Record: intentlog.Lease{Epoch: 3, TS: now.UnixMilli(), TTL: 10000}, FirstSeen: mono}, 0},
		{"vacant", Input{FirstSeen: mono}, 0},
	}
	for _, tc := range cases {
		in := tc.in
		in.Self, in.Now, in.Mono = "a", now, mono
		d := p.Decide(in)
		if got := d.ExpiresIn(); got != tc.want {
			t.Errorf("%s: ExpiresIn %v, want %v (decision %+v)", tc.name, got, tc.want, d)
		}
		if d.Expires != d.Mono+tc.want || d.Mono != mono {
			t.Errorf("%s: Expires %v, Mono %v", tc.name, d.Expires, d.Mono)
		}
	}
}

// HeldError's ClaimableIn is the same figure.
func TestHeldErrorClaimableIn(t *testing.T) {
	c := newCluster("a", "b")
	a := newDev(t, c, "a")
	a.clk.SetSkew(lTTL / 2) // a's clock runs ahead: b's wall clock will disagree at ttl
	mustClaim(t, a)
	b := newDev(t, c, "b")
	b.clk.Advance(lTTL / 5)
	_, err := b.l.Claim(ctxT(t))
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("claim: %v", err)
	}
	if want := lTTL - lTTL/5 + lTTL/2; he.ClaimableIn != want {
		t.Fatalf("ClaimableIn %v, want %v (the wall clock agrees only then)", he.ClaimableIn, want)
	}
}
