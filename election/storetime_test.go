package election

import (
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// storedLog is a fakeLog whose replica remembers when it stored each log index
// (StoreTimer), on its device's monotonic clock, apart from when it applies it (the
// fakeLog's freeze and thaw).
type storedLog struct {
	*fakeLog
	mu sync.Mutex
	at map[uint64]time.Duration
}

func (s *storedLog) StoredAt(index uint64) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[index]
	return at, ok
}

func (s *storedLog) stored(index uint64, at time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[index] = at
}

var _ StoreTimer = (*storedLog)(nil)

// The holder leads Raft and dies right after its renewal reached the standby's log but
// before the standby learned that it was committed: the standby applies the renewal
// only once a new leader is elected and commits it. It counts the renewal as observed
// from when its replica stored it, so it may claim one TTL after that (not one TTL
// after the election), and by then the dead holder's may-sign window, counted from
// before its proposal, closed at least a third of a TTL earlier.
func TestStandbyCountsRecordFromItsStore(t *testing.T) {
	const election = 4 * tick // the new leader's election, applied after it
	c := newCluster("a", "b")
	a := newDev(t, c, "a")
	mustClaim(t, a)
	var sl *storedLog
	b := newDevOn(t, c, "b", "b", func(f *fakeLog) Log { sl = &storedLog{fakeLog: f, at: map[uint64]time.Duration{}}; return sl })

	// a renews past half the TTL; b's replica stores the entry at once but does not
	// apply it (its view is frozen just before).
	for i := 0; i < int(lTTL/tick)/2-1; i++ {
		step(t, tick, a, b)
	}
	before := c.index
	b.log.freeze()
	if held := step(t, tick, a, b); !held["a"] || held["b"] {
		t.Fatalf("renewal tick: held %v", held)
	}
	if c.index != before+1 || countKind[intentlog.RenewEntry](c.entries("a")) != 1 {
		t.Fatalf("premise: a renewed once (index %d -> %d)", before, c.index)
	}
	renewal, storedAt := c.index, b.clk.Mono()
	sl.stored(renewal, storedAt)

	// a dies. The survivors elect a leader, which commits the renewal: b applies it.
	b.clk.Advance(election)
	a.clk.Advance(election)
	b.log.thaw()
	if d := b.l.Decide(); d.Action != Wait || d.Observed != election {
		t.Fatalf("b just applied the renewal stored %v ago: %+v", election, d)
	}

	// One TTL after b stored the renewal, b may claim; not a tick before.
	b.clk.Advance(lTTL - election - time.Millisecond)
	a.clk.Advance(lTTL - election - time.Millisecond)
	if d := b.l.Decide(); d.Action != Wait {
		t.Fatalf("b may claim before a TTL since it stored the renewal: %+v", d)
	}
	b.clk.Advance(time.Millisecond)
	a.clk.Advance(time.Millisecond)
	if d := b.l.Decide(); d.Action != Claim || d.Why != WhyLapsed {
		t.Fatalf("a TTL after b stored the renewal (%v after it applied it): %+v, want a claim",
			lTTL-election, d)
	}
	// The holder, had it lived on cut off, stopped signing a third of a TTL ago.
	if a.l.Holds() {
		t.Fatal("the holder still may sign when the standby may claim")
	}
	if da := a.l.Decide(); da.SinceWrite < lTTL {
		t.Fatalf("holder's time since its renewal's proposal %v < TTL when the standby claims", da.SinceWrite)
	}
	if held, err := b.l.RenewOrClaim(ctxT(t)); !held || err != nil || b.l.Epoch() != 2 {
		t.Fatalf("b's claim: held %v err %v epoch %d", held, err, b.l.Epoch())
	}
}

// A store time is a lower bound only: one in the future (a clock that is not the
// Lease's) or none (a record from a snapshot, an entry replayed at start) counts from
// the apply, as without the capability: a booted device still waits a full TTL.
func TestStoreTimeNeverLaterThanNowNorInvented(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shift time.Duration // store time relative to the moment b sees the record
		none  bool
	}{
		{name: "future", shift: lTTL},
		{name: "none", none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster("a", "b")
			a := newDev(t, c, "a")
			mustClaim(t, a)
			var sl *storedLog
			b := newDevOn(t, c, "b", "b", func(f *fakeLog) Log {
				sl = &storedLog{fakeLog: f, at: map[uint64]time.Duration{}}
				return sl
			})
			if !tc.none {
				sl.stored(c.index, b.clk.Mono()+tc.shift)
				// A new record (b's first observation was in New): make one.
				b.log.freeze()
				step(t, lTTL/2, a)
				b.clk.Advance(lTTL / 2)
				sl.stored(c.index, b.clk.Mono()+tc.shift)
				b.log.thaw()
			}
			d := b.l.Decide()
			if d.Observed != 0 || d.Action != Wait {
				t.Fatalf("store time %v from now (none %v): observed %v, %+v", tc.shift, tc.none, d.Observed, d)
			}
			if got := d.WakeIn(b.clk.Mono()); got != lTTL {
				t.Fatalf("b may claim in %v, want a full TTL", got)
			}
		})
	}
}
