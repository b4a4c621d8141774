package testnet

import (
	"sync"
	"time"

	"github.com/batonhq/baton/election"
)

// Clock is one device's controllable real-time clock (election.Clock and
// election.AfterFuncClock). It follows the system clock with an offset (skew) and a
// rate (drift): after real time r has passed, both readings have moved by r*rate.
// Pause freezes both readings (a frozen process or a suspended laptop); Resume lets
// the monotonic reading carry on from where it stood, while the wall reading jumps to
// system time + offset again (a suspended machine's wall clock catches up on wake,
// its monotonic clock does not count the suspension). AfterFunc callbacks fire on
// this clock's monotonic reading: never while paused, later when the rate is slow.
// All methods are safe for concurrent use.
type Clock struct {
	mu        sync.Mutex
	anchorSys time.Time     // system reading (with monotonic) at the last anchor
	anchorMon time.Duration // Mono at the last anchor
	wallBase  time.Time     // wall reading at Mono 0 (before offset), stripped
	offset    time.Duration
	rate      float64
	paused    bool
	timers    map[*clockTimer]struct{}
}

type clockTimer struct {
	due  time.Duration // on Mono
	f    func()
	t    *time.Timer
	done bool
}

var (
	_ election.Clock          = (*Clock)(nil)
	_ election.AfterFuncClock = (*Clock)(nil)
)

// NewClock returns a Clock reading the system time, rate 1, no offset.
func NewClock() *Clock {
	now := time.Now()
	const origin = time.Hour // Mono does not start at zero (tests must not rely on it)
	return &Clock{anchorSys: now, anchorMon: origin, wallBase: now.Round(0).Add(-origin), rate: 1,
		timers: map[*clockTimer]struct{}{}}
}

func (c *Clock) monoLocked() time.Duration {
	if c.paused {
		return c.anchorMon
	}
	return c.anchorMon + time.Duration(float64(time.Since(c.anchorSys))*c.rate)
}

// Mono is the monotonic reading.
func (c *Clock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.monoLocked()
}

// Now is the wall reading: base + Mono + offset.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallBase.Add(c.monoLocked() + c.offset)
}

// Offset returns the wall clock's current offset (skew).
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// SetOffset sets the wall clock's offset (skew): the wall reading steps, the
// monotonic one does not.
func (c *Clock) SetOffset(d time.Duration) {
	c.mu.Lock()
	c.offset = d
	c.mu.Unlock()
}

// Rate returns the clock's rate.
func (c *Clock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// SetRate sets how fast the clock runs relative to the system clock (1 = in step,
// 1.05 = 5% fast). Rates <= 0 are refused (a clock never stops or goes back; use
// Pause). Pending timers are re-armed for the new rate.
func (c *Clock) SetRate(r float64) {
	if r <= 0 {
		return
	}
	c.mu.Lock()
	c.reanchorLocked()
	c.rate = r
	c.rearmLocked()
	c.mu.Unlock()
}

// Paused reports whether the clock is frozen.
func (c *Clock) Paused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

// Pause freezes both readings until Resume.
func (c *Clock) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return
	}
	c.reanchorLocked()
	c.paused = true
	for t := range c.timers {
		t.t.Stop()
	}
}

// Resume unfreezes the clock: Mono continues from where it stood, Now catches up
// with the system clock (plus offset); timers are re-armed.
func (c *Clock) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		return
	}
	now := time.Now()
	frozen := now.Sub(c.anchorSys)
	c.anchorSys = now
	c.paused = false
	// The wall clock catches up by the frozen time; Mono does not.
	c.wallBase = c.wallBase.Add(frozen)
	c.rearmLocked()
}

func (c *Clock) reanchorLocked() {
	m := c.monoLocked()
	c.anchorSys = time.Now()
	c.anchorMon = m
}

func (c *Clock) realDelayLocked(due time.Duration) time.Duration {
	left := due - c.monoLocked()
	if left <= 0 {
		return 0
	}
	return time.Duration(float64(left)/c.rate) + time.Microsecond
}

func (c *Clock) rearmLocked() {
	if c.paused {
		return
	}
	for t := range c.timers {
		t.t.Reset(c.realDelayLocked(t.due))
	}
}

// AfterFunc runs f in its own goroutine once d has passed on this clock's monotonic
// reading. stop cancels it and reports whether it did.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{due: c.monoLocked() + d, f: f}
	t.t = time.AfterFunc(c.realDelayLocked(t.due), func() { c.fire(t) })
	if c.paused {
		t.t.Stop()
	}
	c.timers[t] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.done {
			return false
		}
		t.done = true
		t.t.Stop()
		delete(c.timers, t)
		return true
	}
}

func (c *Clock) fire(t *clockTimer) {
	c.mu.Lock()
	if t.done || c.paused {
		c.mu.Unlock()
		return
	}
	if left := c.realDelayLocked(t.due); left > 0 {
		t.t.Reset(left) // the rate changed or a pause intervened: not due yet
		c.mu.Unlock()
		return
	}
	t.done = true
	delete(c.timers, t)
	c.mu.Unlock()
	t.f()
}
