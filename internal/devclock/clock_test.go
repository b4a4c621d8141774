package devclock

import (
	"testing"
	"testing/synctest"
	"time"
)

func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d > time.Millisecond || d < -time.Millisecond {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestClock: rate, steps, both kinds of pause (and a rate change during one), and
// timers on the monotonic reading.
func TestClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New()
		m0, w0 := c.Mono(), c.Now()
		time.Sleep(time.Second)
		near(t, "mono after 1s", c.Mono()-m0, time.Second)
		c.SetRate(1.1)
		time.Sleep(time.Second)
		near(t, "mono after 1s at 1.1x", c.Mono()-m0, 2100*time.Millisecond)
		c.Step(-3 * time.Second)
		near(t, "wall after a step back", c.Now().Sub(w0), -900*time.Millisecond)
		near(t, "offset", c.Offset(), -2900*time.Millisecond)

		// A SIGSTOP: both readings catch up on resume; a rate change meanwhile does not
		// lose the pause.
		m1, w1 := c.Mono(), c.Now()
		c.Pause()
		time.Sleep(time.Second)
		if c.Mono() != m1 || !c.Now().Equal(w1) {
			t.Fatal("a paused clock moved")
		}
		c.SetRate(1)
		time.Sleep(time.Second)
		c.Resume(true)
		near(t, "mono after a 2s sigstop", c.Mono()-m1, 2*time.Second)
		near(t, "wall after a 2s sigstop", c.Now().Sub(w1), 2*time.Second)

		// A suspend: only the wall reading catches up.
		m2, w2 := c.Mono(), c.Now()
		c.Pause()
		time.Sleep(time.Second)
		c.Resume(false)
		near(t, "mono after a 1s suspend", c.Mono()-m2, 0)
		near(t, "wall after a 1s suspend", c.Now().Sub(w2), time.Second)

		// Timers run on Mono: not while paused, later at a slow rate.
		fired := make(chan time.Duration, 1)
		start := time.Now()
		c.SetRate(0.5)
		c.AfterFunc(time.Second, func() { fired <- time.Since(start) })
		time.Sleep(500 * time.Millisecond) // 250ms on the clock
		c.Pause()
		time.Sleep(time.Second)
		c.Resume(false) // 250ms done, 750ms to go: 1.5s of virtual time at 0.5x
		near(t, "timer", <-fired, 3*time.Second)
		stop := c.AfterFunc(time.Second, func() { t.Error("a stopped timer fired") })
		if !stop() {
			t.Error("stop of a pending timer reported false")
		}
		time.Sleep(3 * time.Second)
	})
}

// TestClockSetOffsetAndPaused: the drills' skew (an absolute offset), Paused, a stop
// that reports true once, and a timer that waits out a pause.
func TestClockSetOffsetAndPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New()
		near(t, "fresh offset", c.Now().Sub(time.Now()), 0)
		c.Step(time.Second)
		c.SetOffset(3 * time.Second) // absolute, not added to the step
		near(t, "wall after SetOffset", c.Now().Sub(time.Now()), 3*time.Second)
		near(t, "offset", c.Offset(), 3*time.Second)

		fired := make(chan time.Duration, 1)
		start := c.Mono()
		c.AfterFunc(20*time.Millisecond, func() { fired <- c.Mono() - start })
		c.Pause()
		if !c.Paused() {
			t.Fatal("not paused")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-fired:
			t.Fatal("timer fired while paused")
		default:
		}
		c.Resume(false)
		if c.Paused() {
			t.Fatal("still paused after Resume")
		}
		near(t, "timer on the clock", <-fired, 20*time.Millisecond)
		near(t, "wall after a suspend", c.Now().Sub(time.Now()), 3*time.Second)

		stop := c.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
		if !stop() || stop() {
			t.Fatal("stop should report true once")
		}
	})
}
