package testnet

import (
	"testing"
	"time"
)

func TestClockOffsetRatePause(t *testing.T) {
	c := NewClock()
	if d := c.Now().Sub(time.Now()); d > 50*time.Millisecond || d < -50*time.Millisecond {
		t.Fatalf("fresh clock off by %v", d)
	}
	c.SetOffset(3 * time.Second)
	if d := c.Now().Sub(time.Now()); d < 2900*time.Millisecond || d > 3100*time.Millisecond {
		t.Fatalf("offset 3s: off by %v", d)
	}
	m0 := c.Mono()
	c.Pause()
	if !c.Paused() {
		t.Fatal("not paused")
	}
	w0 := c.Now()
	<-time.After(30 * time.Millisecond) // let real time pass (not synchronisation)
	if c.Mono() != c.Mono() || !c.Now().Equal(w0) {
		t.Fatal("paused clock moved")
	}
	c.Resume()
	if m := c.Mono() - m0; m > 20*time.Millisecond {
		t.Fatalf("mono counted the pause: %v", m)
	}
	if d := c.Now().Sub(time.Now()); d < 2900*time.Millisecond || d > 3100*time.Millisecond {
		t.Fatalf("wall did not catch up after resume: off by %v", d)
	}
	c.SetRate(2)
	m1, r1 := c.Mono(), time.Now()
	<-time.After(40 * time.Millisecond)
	dm, dr := c.Mono()-m1, time.Since(r1)
	if ratio := float64(dm) / float64(dr); ratio < 1.7 || ratio > 2.3 {
		t.Fatalf("rate 2: mono moved %v in %v real", dm, dr)
	}
}

func TestClockAfterFuncWaitsForResume(t *testing.T) {
	c := NewClock()
	fired := make(chan time.Duration, 1)
	start := c.Mono()
	c.AfterFunc(20*time.Millisecond, func() { fired <- c.Mono() - start })
	c.Pause()
	select {
	case <-fired:
		t.Fatal("timer fired while paused")
	case <-time.After(60 * time.Millisecond):
	}
	c.Resume()
	select {
	case d := <-fired:
		if d < 20*time.Millisecond {
			t.Fatalf("fired early on the clock: %v", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("timer never fired after resume")
	}
	stop := c.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	if !stop() || stop() {
		t.Fatal("stop should report true once")
	}
}
