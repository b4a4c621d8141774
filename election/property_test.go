package election

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"pgregory.net/rapid"
)

// simDev is one device in the property tests.
type simDev struct {
	id        string
	clk       *ManualClock
	log       *syncLog
	stored    *storedSyncLog
	l         *Lease
	mode      string // "plain", "skew" (its wall clock may step), "suspend" (it may sleep)
	rate      int    // its clocks run at rate/1000 of real time (crystal drift, 0.9 to 1.1)
	suspended bool   // its monotonic clock stands still, its wall clock runs on, its loop stops
	paused    bool   // its loop stops (SIGSTOP, GC pause); both clocks run on
}

type sim struct {
	c      *cluster
	devs   []*simDev
	steals bool
	ctx    context.Context
}

func newSim(t *rapid.T, steals bool) *sim {
	n := rapid.IntRange(2, 3).Draw(t, "devices")
	ids := []string{"a", "b", "c"}[:n]
	s := &sim{c: newCluster(ids...), steals: steals, ctx: context.Background()}
	for _, id := range ids {
		skew := time.Duration(rapid.IntRange(-int(lTTL/ms), int(lTTL/ms)).Draw(t, "skew_"+id)) * ms
		clk := NewManualClock(t0)
		clk.SetSkew(skew)
		lg := &syncLog{fakeLog: newFakeLog(s.c, id)}
		// Each replica stores every entry the moment it is proposed (on its own
		// clock), before its view may apply it: the earliest a store can be, so the
		// store-time count (StoreTimer) is tried at its most aggressive.
		st := &storedSyncLog{syncLog: lg, at: map[uint64]time.Duration{}}
		l, err := New(st, id, clk, Options{TTL: lTTL})
		if err != nil {
			t.Fatal(err)
		}
		mode := rapid.SampledFrom([]string{"plain", "skew", "suspend"}).Draw(t, "mode_"+id)
		rate := rapid.IntRange(900, 1100).Draw(t, "rate_"+id)
		s.devs = append(s.devs, &simDev{id: id, clk: clk, log: lg, stored: st, l: l, mode: mode, rate: rate})
	}
	// "Never claim a live lease": when an ordinary claim is about to win the CAS, no
	// other device may believe it holds the lease. (Checked before the apply, while
	// every view still shows the pre-claim state.)
	//
	// Proposals are in flight concurrently in a real cluster: sometimes another device's
	// loop runs (and may renew or claim) between a claim's decision and its apply.
	interleaving := false
	s.c.intercept = func(_ context.Context, from string, e intentlog.Entry) (bool, error) {
		ce, ok := e.(intentlog.ClaimEntry)
		if !ok || ce.Force || s.steals {
			return true, nil
		}
		if !interleaving && rapid.Bool().Draw(t, "interleave") {
			other := s.pick(t, "interleaved")
			if other.id != from && !other.paused && !other.suspended {
				interleaving = true
				_, err := other.l.RenewOrClaim(s.ctx)
				interleaving = false
				s.ok(t, other.id+" interleaved RenewOrClaim", err)
			}
		}
		if ce.PrevRev != s.c.record().Rev {
			return true, nil // the CAS will reject it
		}
		for _, d := range s.devs {
			if d.id != from && d.l.Holds() {
				t.Fatalf("%s claims epoch %d while %s holds a live lease (%+v)", from, ce.Epoch, d.id, s.c.record())
			}
		}
		return true, nil
	}
	checkClaim := s.c.intercept
	s.c.intercept = func(ctx context.Context, from string, e intentlog.Entry) (bool, error) {
		apply, err := checkClaim(ctx, from, e)
		if apply {
			next := s.c.view().AppliedIndex + 1 // the index this entry gets
			for _, d := range s.devs {
				d.stored.at[next] = d.clk.Mono()
			}
		}
		return apply, err
	}
	return s
}

// storedSyncLog is a syncLog that offers store times (StoreTimer).
type storedSyncLog struct {
	*syncLog
	at map[uint64]time.Duration // the property tests run on one goroutine
}

func (s *storedSyncLog) StoredAt(index uint64) (time.Duration, bool) {
	at, ok := s.at[index]
	return at, ok
}

func (s *sim) pick(t *rapid.T, label string) *simDev {
	return s.devs[rapid.IntRange(0, len(s.devs)-1).Draw(t, label)]
}

// ok fails the run on an error (RenewOrClaim reports only unexpected ones).
func (s *sim) ok(t *rapid.T, what string, err error) {
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (s *sim) actions() map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){
		"tick": func(t *rapid.T) {
			d := s.pick(t, "dev")
			if d.paused || d.suspended {
				return
			}
			_, err := d.l.RenewOrClaim(s.ctx)
			s.ok(t, d.id+" RenewOrClaim", err)
		},
		"tickAll": func(t *rapid.T) {
			for _, d := range s.devs {
				if !d.paused && !d.suspended {
					_, err := d.l.RenewOrClaim(s.ctx)
					s.ok(t, d.id+" RenewOrClaim", err)
				}
			}
		},
		"elapse": func(t *rapid.T) {
			// Mostly short steps (a tick or so), sometimes up to half a TTL.
			dt := time.Duration(rapid.OneOf(rapid.IntRange(1, 1500), rapid.IntRange(1, int(lTTL/2/ms))).Draw(t, "ms")) * ms
			for _, d := range s.devs {
				ddt := dt * time.Duration(d.rate) / 1000
				if d.suspended {
					d.clk.AdvanceWall(ddt)
				} else {
					d.clk.Advance(ddt)
				}
			}
		},
		"suspend": func(t *rapid.T) {
			d := s.pick(t, "dev")
			if d.mode != "suspend" {
				return
			}
			d.suspended = !d.suspended
		},
		"pause": func(t *rapid.T) {
			d := s.pick(t, "dev")
			d.paused = !d.paused
		},
		"wallStep": func(t *rapid.T) {
			d := s.pick(t, "dev")
			if d.mode != "skew" {
				return
			}
			d.clk.AdvanceWall(time.Duration(rapid.IntRange(-int(lTTL/ms), int(lTTL/ms)).Draw(t, "step_ms")) * ms)
		},
		"staleView": func(t *rapid.T) {
			d := s.pick(t, "dev")
			if d.log.isFrozen() {
				d.log.thaw()
			} else {
				d.log.freeze()
			}
		},
		"restart": func(t *rapid.T) {
			// The process crashes and comes back with no memory (same ID, same
			// replica, same clocks).
			d := s.pick(t, "dev")
			l, err := New(d.log, d.id, d.clk, Options{TTL: lTTL})
			if err != nil {
				t.Fatal(err)
			}
			d.l, d.paused, d.suspended = l, false, false
		},
		"observe": func(t *rapid.T) {
			s.pick(t, "dev").l.Observe()
		},
		"release": func(t *rapid.T) {
			d := s.pick(t, "dev")
			if d.paused || d.suspended || !d.l.Holds() {
				return
			}
			s.ok(t, d.id+" Release", s.robbed(d.l.Release(s.ctx)))
		},
		"transfer": func(t *rapid.T) {
			d, to := s.pick(t, "dev"), s.pick(t, "to")
			if d == to || d.paused || d.suspended || !d.l.Holds() {
				return
			}
			s.ok(t, d.id+" Transfer", s.robbed(d.l.Transfer(s.ctx, to.id)))
		},
	}
	if s.steals {
		a["steal"] = func(t *rapid.T) {
			d := s.pick(t, "dev")
			if err := d.l.Steal(s.ctx, "drill"); err != nil && !isLostRace(err) {
				t.Fatalf("%s Steal: %v", d.id, err)
			}
		}
	}
	return a
}

// robbed forgives a rejected release or transfer when steals are in play: a holder on a
// stale replica does not know yet that it was robbed. Without steals it is a failure.
func (s *sim) robbed(err error) error {
	if s.steals && errors.Is(err, ErrNotHolder) {
		return nil
	}
	return err
}

func isLostRace(err error) bool {
	var re *RejectedError
	return errors.As(err, &re) && (re.Reason == intentlog.ReasonEpochMismatch || re.Reason == intentlog.ReasonStaleRev)
}

// run performs a random sequence of actions (the clock and tick actions weighted up),
// checking the invariants after each.
func (s *sim) run(t *rapid.T) {
	acts := s.actions()
	var names []string
	for name := range acts {
		names = append(names, name)
		if name == "tick" || name == "tickAll" || name == "elapse" {
			names = append(names, name, name, name)
		}
	}
	sort.Strings(names) // map order is random; rapid needs a deterministic choice list
	steps := rapid.IntRange(20, 200).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		acts[rapid.SampledFrom(names).Draw(t, "action")](t)
		s.check(t)
	}
}

// check is the invariant, evaluated after every action.
func (s *sim) check(t *rapid.T) {
	auth := s.c.record()
	byEpoch := map[uint64]string{}
	var holders []string
	for _, d := range s.devs {
		tn, held := d.l.Tenure()
		if held != d.l.Holds() {
			t.Fatalf("%s: Tenure and Holds disagree", d.id)
		}
		if !held {
			if !closed(tn.Done) {
				t.Fatalf("%s: not holding but Lost is open", d.id)
			}
			continue
		}
		holders = append(holders, d.id)
		if other, dup := byEpoch[tn.Epoch]; dup {
			t.Fatalf("%s and %s both hold epoch %d", other, d.id, tn.Epoch)
		}
		byEpoch[tn.Epoch] = d.id
		if v := d.log.View().Lease; v.Holder != d.id || v.Epoch != tn.Epoch {
			t.Fatalf("%s holds epoch %d but its applied record is %+v", d.id, tn.Epoch, v)
		}
		if closed(tn.Done) {
			t.Fatalf("%s holds but its Lost channel is closed", d.id)
		}
		// Without steals the timing rules alone must keep holds exclusive: whoever
		// holds is the authoritative holder at that epoch, even on a stale replica.
		if !s.steals && (auth.Holder != d.id || auth.Epoch != tn.Epoch) {
			t.Fatalf("%s holds epoch %d (mode %s, stale view %v) but the log says %+v",
				d.id, tn.Epoch, d.mode, d.log.isFrozen(), auth)
		}
	}
	if !s.steals && len(holders) > 1 {
		t.Fatalf("two holders at once: %v", holders)
	}
}

// heal ends every fault and runs all loops; someone must hold within a few TTLs.
func (s *sim) heal(t *rapid.T) {
	for _, d := range s.devs {
		d.suspended, d.paused = false, false
		d.log.thaw()
	}
	for i := 0; i < 5*int(lTTL/tick); i++ {
		for _, d := range s.devs {
			d.clk.Advance(tick * time.Duration(d.rate) / 1000)
		}
		held := 0
		for _, d := range s.devs {
			h, err := d.l.RenewOrClaim(s.ctx)
			s.ok(t, d.id+" RenewOrClaim", err)
			if h {
				held++
			}
		}
		s.check(t)
		if held == 1 {
			return
		}
	}
	t.Fatalf("no holder within 5 TTLs after healing: %+v", s.c.record())
}

// Random interleavings of two or three devices' ticks, clock advances, wall-clock steps
// (up to a TTL either way), suspends, pauses, stale replicas, releases and transfers:
// never two holders (and so never two for one epoch), never a holder that is not the
// applied holder; and once the faults end, someone holds.
func TestPropertyNeverTwoHolders(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := newSim(t, false)
		s.run(t)
		s.heal(t)
	})
}

// With operator steals in the mix, a stale replica may still believe in an older epoch,
// but never do two devices hold the same epoch, and a holder's own applied record names
// it at that epoch.
func TestPropertyStealsNeverShareAnEpoch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := newSim(t, true)
		s.run(t)
	})
}
