package election

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSystemClock(t *testing.T) {
	c := SystemClock()
	now := c.Now()
	if strings.Contains(now.String(), "m=") {
		t.Fatalf("Now() carries a monotonic reading: %v", now)
	}
	if d := time.Since(now); d < 0 || d > time.Minute {
		t.Fatalf("Now() is %v away from time.Now", d)
	}
	a := c.Mono()
	b := c.Mono()
	if a < 0 || b < a {
		t.Fatalf("Mono went backwards or negative: %v then %v", a, b)
	}
	fired := make(chan struct{})
	ac, ok := c.(AfterFuncClock)
	if !ok {
		t.Fatal("SystemClock does not implement AfterFuncClock")
	}
	ac.AfterFunc(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not fire")
	}
	stop := ac.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	if !stop() {
		t.Fatal("stop() of a pending timer returned false")
	}
}

func TestManualClock(t *testing.T) {
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	c := NewManualClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now() = %v, want %v", c.Now(), start)
	}
	m0 := c.Mono()
	if m0 <= 0 {
		t.Fatalf("Mono() starts at %v, want a positive origin", m0)
	}
	c.Advance(3 * time.Second)
	if got := c.Mono() - m0; got != 3*time.Second {
		t.Fatalf("Advance moved Mono by %v", got)
	}
	if got := c.Now().Sub(start); got != 3*time.Second {
		t.Fatalf("Advance moved Now by %v", got)
	}
	c.SetSkew(-time.Minute)
	if got := c.Now().Sub(start); got != 3*time.Second-time.Minute {
		t.Fatalf("SetSkew: Now moved by %v", got)
	}
	if c.Mono()-m0 != 3*time.Second || c.Skew() != -time.Minute {
		t.Fatalf("SetSkew moved Mono (%v) or Skew() = %v", c.Mono()-m0, c.Skew())
	}
	c.AdvanceWall(2 * time.Minute)
	if got := c.Now().Sub(start); got != 3*time.Second+time.Minute {
		t.Fatalf("AdvanceWall: Now moved by %v", got)
	}
	if c.Mono()-m0 != 3*time.Second {
		t.Fatal("AdvanceWall moved Mono")
	}

	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Advance(-1) did not panic")
			}
		}()
		c.Advance(-1)
	}()
}

func TestManualClockAfterFunc(t *testing.T) {
	c := NewManualClock(time.Unix(0, 0))
	m0 := c.Mono()
	var got []string
	var seen []time.Duration
	add := func(name string) func() {
		return func() { got = append(got, name); seen = append(seen, c.Mono()-m0) }
	}
	c.AfterFunc(3*time.Second, add("c"))
	c.AfterFunc(time.Second, add("a"))
	stopB := c.AfterFunc(2*time.Second, add("b"))
	c.AfterFunc(time.Second, add("a2"))
	if !stopB() {
		t.Fatal("stop of pending timer returned false")
	}
	if stopB() {
		t.Fatal("second stop returned true")
	}
	c.Advance(999 * time.Millisecond)
	if len(got) != 0 {
		t.Fatalf("fired early: %v", got)
	}
	// A callback may register another timer that falls due within the same Advance.
	c.AfterFunc(1500*time.Millisecond, func() {
		got = append(got, "d")
		seen = append(seen, c.Mono()-m0)
		c.AfterFunc(100*time.Millisecond, add("e"))
	})
	c.Advance(5 * time.Second)
	// d (registered at 0.999s, due 2.499s) and e (due 2.599s) come before c (3s).
	want := []string{"a", "a2", "d", "e", "c"}
	wantAt := []time.Duration{time.Second, time.Second, 2499 * time.Millisecond, 2599 * time.Millisecond, 3 * time.Second}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("fired %v, want %v", got, want)
	}
	for i := range wantAt {
		if seen[i] != wantAt[i] {
			t.Fatalf("callback %s saw Mono %v, want %v", got[i], seen[i], wantAt[i])
		}
	}
	if c.Mono()-m0 != 5999*time.Millisecond {
		t.Fatalf("Mono after Advance = %v", c.Mono()-m0)
	}
	if n := c.PendingTimers(); n != 0 {
		t.Fatalf("%d timers still pending", n)
	}
	fired := false
	c.AfterFunc(-time.Second, func() { fired = true })
	c.Advance(0)
	if !fired {
		t.Fatal("a timer due now did not fire on Advance(0)")
	}
}

func TestManualClockConcurrent(t *testing.T) {
	c := NewManualClock(time.Unix(0, 0))
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				c.Advance(time.Millisecond)
				c.AdvanceWall(time.Microsecond)
				_ = c.Now()
				stop := c.AfterFunc(time.Millisecond, func() { _ = c.Mono() })
				if j%2 == 0 {
					stop()
				}
			}
		}()
	}
	wg.Wait()
	if got := c.Mono() - time.Hour; got != 800*time.Millisecond {
		t.Fatalf("Mono advanced %v, want 800ms", got)
	}
}
