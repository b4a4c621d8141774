// Package devclock is one device's controllable clock for tests, drills and the
// simulator: an election.Clock and election.AfterFuncClock that follows time.Now (the
// system clock, or a synctest bubble's virtual time) with a wall offset (skew, NTP
// steps), a rate (a crystal running fast or slow) and pauses of both kinds.
package devclock

import (
	"sync"
	"time"

	"github.com/batonhq/baton/election"
)

// Clock is one device's clock (election.Clock and election.AfterFuncClock) on time.Now:
// the system clock in drills, virtual time inside a synctest bubble (the simulator).
// It has a wall offset (skew, NTP steps), a rate (a crystal running fast or slow)
// and pauses.
//
// A pause freezes both readings and every AfterFunc timer. On Resume the wall reading
// always catches up with the time that passed; the monotonic reading does too for a
// stopped process (SIGSTOP: CLOCK_MONOTONIC kept counting, the process just did not
// look) and does not for a suspended machine (CLOCK_MONOTONIC does not count a
// suspend). AfterFunc callbacks fire on the monotonic reading: never while paused,
// later when the rate is slow.
//
// All methods are safe for concurrent use.
type Clock struct {
	mu       sync.Mutex
	anchorV  time.Time     // time.Now at the last anchor
	anchorM  time.Duration // Mono at the last anchor
	wallBase time.Time     // wall reading at Mono 0, before the offset
	offset   time.Duration
	rate     float64
	paused   bool
	timers   map[*clockTimer]struct{}
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

// monoOrigin keeps Mono away from zero (code must not rely on it starting there).
const monoOrigin = time.Hour

// New returns a clock in step with time.Now: rate 1, no offset.
func New() *Clock {
	now := time.Now()
	return &Clock{anchorV: now, anchorM: monoOrigin, wallBase: now.Round(0).Add(-monoOrigin), rate: 1,
		timers: map[*clockTimer]struct{}{}}
}

func (c *Clock) monoLocked() time.Duration {
	if c.paused {
		return c.anchorM
	}
	return c.anchorM + time.Duration(float64(time.Since(c.anchorV))*c.rate)
}

// Mono is the monotonic reading.
func (c *Clock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.monoLocked()
}

// Now is the wall reading (no monotonic component).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallBase.Add(c.monoLocked() + c.offset)
}

// Step moves the wall reading by d (either way); the monotonic reading is unaffected.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// SetOffset sets the sum of the steps: the wall reading is then d away from time.Now
// (plus what suspend-mode resumes added); the monotonic reading is unaffected.
func (c *Clock) SetOffset(d time.Duration) {
	c.mu.Lock()
	c.offset = d
	c.mu.Unlock()
}

// Offset returns the wall clock's offset from time.Now (the sum of the steps,
// plus the suspensions a suspend-mode resume added).
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallBase.Add(c.monoLocked() + c.offset).Sub(time.Now())
}

// SetRate sets how fast both readings run against time.Now (rates <= 0 are
// ignored). Pending timers are re-armed.
func (c *Clock) SetRate(r float64) {
	if r <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reanchorLocked()
	c.rate = r
	c.rearmLocked()
}

// Rate returns the current rate.
func (c *Clock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// Paused reports whether the clock is frozen.
func (c *Clock) Paused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

// Pause freezes both readings and the timers until Resume.
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

// Resume ends a pause. With monoCatchUp (a stopped process) both readings move on by
// the paused time; without (a suspended machine) only the wall reading does.
func (c *Clock) Resume(monoCatchUp bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		return
	}
	frozen := time.Duration(float64(time.Since(c.anchorV)) * c.rate)
	c.anchorV = time.Now()
	c.paused = false
	if monoCatchUp {
		c.anchorM += frozen
	} else {
		c.wallBase = c.wallBase.Add(frozen)
	}
	c.rearmLocked()
}

// reanchorLocked moves the anchor to now (before a rate change). While paused the
// anchor stays at the pause's start: Resume measures the pause from it.
func (c *Clock) reanchorLocked() {
	if c.paused {
		return
	}
	m := c.monoLocked()
	c.anchorV = time.Now()
	c.anchorM = m
}

// delayLocked is the time.Now until Mono reaches due.
func (c *Clock) delayLocked(due time.Duration) time.Duration {
	left := due - c.monoLocked()
	if left <= 0 {
		return 0
	}
	return time.Duration(float64(left)/c.rate) + 1
}

func (c *Clock) rearmLocked() {
	if c.paused {
		return
	}
	for t := range c.timers {
		t.t.Reset(c.delayLocked(t.due))
	}
}

// AfterFunc runs f in its own goroutine once d has passed on Mono. stop cancels it
// and reports whether it did.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{due: c.monoLocked() + d, f: f}
	t.t = time.AfterFunc(c.delayLocked(t.due), func() { c.fire(t) })
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
	if left := c.delayLocked(t.due); left > 0 {
		t.t.Reset(left) // the rate changed: not due yet
		c.mu.Unlock()
		return
	}
	t.done = true
	delete(c.timers, t)
	c.mu.Unlock()
	t.f()
}

// StopTimers cancels every pending timer (the simulation is over).
func (c *Clock) StopTimers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.timers {
		t.done = true
		t.t.Stop()
	}
	clear(c.timers)
}
