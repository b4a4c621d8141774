package election

import (
	"sort"
	"sync"
	"time"
)

// Clock is the time source of the lease. It has two readings because the lease needs
// both: the wall clock is what other devices can compare against (the record's ts), and
// the monotonic clock is what this device can trust to measure how long it has waited.
type Clock interface {
	// Now is the wall clock. It may be skewed against other devices and may step
	// (NTP); it must not carry a monotonic reading (the lease compares it across
	// devices, where a monotonic reading means nothing).
	Now() time.Time
	// Mono is a monotonic reading from an arbitrary origin. It never jumps and never
	// goes backwards. Readings are only compared with readings of the same Clock.
	Mono() time.Duration
}

// AfterFuncClock is an optional capability of a Clock: run f once after d has passed on
// the monotonic clock, in its own goroutine or, for a ManualClock, inside Advance. stop
// cancels a pending call and reports whether it did. Lease uses it to close Lost the
// moment the may-sign window ends; with a Clock that lacks it, the window's end is
// noticed at the next call into the Lease (the signer calls Holds before every commit,
// so safety does not depend on the timer, only the promptness of the signal does).
type AfterFuncClock interface {
	Clock
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock returns the real clock: Now is time.Now with its monotonic reading
// stripped, Mono is the time elapsed (on Go's monotonic clock) since SystemClock was
// called. It also implements AfterFuncClock with time.AfterFunc.
func SystemClock() Clock {
	return systemClock{start: time.Now()}
}

type systemClock struct{ start time.Time }

func (c systemClock) Now() time.Time      { return time.Now().Round(0) }
func (c systemClock) Mono() time.Duration { return time.Since(c.start) }
func (c systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

var (
	_ AfterFuncClock = systemClock{}
	_ AfterFuncClock = (*ManualClock)(nil)
)

// ManualClock is a Clock that moves only when told to, for tests of this and other
// packages. Advance moves both readings (time passes); AdvanceWall and SetSkew move only
// the wall clock (an NTP step, a skewed device, or a suspended laptop whose monotonic
// clock stood still while the wall clock ran on). Callbacks registered with AfterFunc
// run synchronously inside Advance, in due order, with the clock reading their due time,
// and without the clock's lock held (they may read the clock). All methods are safe for
// concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	base   time.Time // wall reading at mono 0, before skew
	mono   time.Duration
	skew   time.Duration
	seq    uint64
	timers []*manualTimer
}

type manualTimer struct {
	at   time.Duration
	seq  uint64
	f    func()
	done bool
}

// NewManualClock returns a ManualClock whose wall clock reads start (stripped of any
// monotonic reading) and whose monotonic clock reads a fixed nonzero origin (one hour),
// so that tests do not accidentally rely on Mono starting at zero.
func NewManualClock(start time.Time) *ManualClock {
	const origin = time.Hour
	return &ManualClock{base: start.Round(0).Add(-origin), mono: origin}
}

// Now returns the wall reading: start + elapsed + skew.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(c.mono + c.skew)
}

// Mono returns the monotonic reading.
func (c *ManualClock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Skew returns the wall clock's current offset from start + elapsed.
func (c *ManualClock) Skew() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skew
}

// SetSkew sets the wall clock's offset; the monotonic clock is unaffected.
func (c *ManualClock) SetSkew(d time.Duration) {
	c.mu.Lock()
	c.skew = d
	c.mu.Unlock()
}

// AdvanceWall steps the wall clock by d (which may be negative) without moving the
// monotonic clock.
func (c *ManualClock) AdvanceWall(d time.Duration) {
	c.mu.Lock()
	c.skew += d
	c.mu.Unlock()
}

// Advance moves both readings forward by d and runs the AfterFunc callbacks that fall
// due, in order. It panics on a negative d: the monotonic clock never goes backwards.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("election: ManualClock.Advance with a negative duration")
	}
	c.mu.Lock()
	target := c.mono + d
	for {
		t := c.popDueLocked(target)
		if t == nil {
			break
		}
		if t.at > c.mono {
			c.mono = t.at
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	if target > c.mono {
		c.mono = target
	}
	c.mu.Unlock()
}

// popDueLocked removes and returns the earliest pending timer due at or before target.
func (c *ManualClock) popDueLocked(target time.Duration) *manualTimer {
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.done {
			live = append(live, t)
		}
	}
	c.timers = live
	if len(c.timers) == 0 {
		return nil
	}
	sort.Slice(c.timers, func(i, j int) bool {
		if c.timers[i].at != c.timers[j].at {
			return c.timers[i].at < c.timers[j].at
		}
		return c.timers[i].seq < c.timers[j].seq
	})
	t := c.timers[0]
	if t.at > target {
		return nil
	}
	t.done = true
	c.timers = c.timers[1:]
	return t
}

// AfterFunc registers f to run inside the Advance that moves the monotonic clock to
// d from now (d <= 0: at the next Advance, even Advance(0)).
func (c *ManualClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d < 0 {
		d = 0
	}
	c.seq++
	t := &manualTimer{at: c.mono + d, seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.done {
			return false
		}
		t.done = true
		return true
	}
}

// PendingTimers reports how many AfterFunc callbacks are waiting.
func (c *ManualClock) PendingTimers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}
