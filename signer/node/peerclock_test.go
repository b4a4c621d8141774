package node

import (
	"testing"
	"time"
)

// The cluster's clock (peerclock.go): the earliest of this device's clock and the
// voters' it measured lately, known once a majority of the voters is measured.
func TestPeerClocksEarliest(t *testing.T) {
	base := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sample := func(off time.Duration, mid time.Duration) clockSample {
		return clockSample{theirs: base.Add(off), mid: mid, at: mid}
	}
	var p peerClocks
	if got, _, ok := p.now(base, 0, 1, true); !ok || !got.Equal(base) {
		t.Fatalf("a device alone: %v %v, want its own clock", got, ok)
	}

	// Three voters: this device 10 minutes fast, the others on time and 1 s behind.
	own := base.Add(10 * time.Minute)
	if _, _, ok := p.now(own, 0, 3, true); ok {
		t.Fatal("known with one voter of three measured (itself)")
	}
	p.put("b", sample(0, 0))
	got, _, ok := p.now(own, 0, 3, true)
	if !ok || !got.Equal(base) {
		t.Fatalf("two of three measured: %v %v, want %v (the earlier)", got, ok, base)
	}
	p.put("c", sample(-time.Second, 0))
	if got, _, _ := p.now(own, 0, 3, true); !got.Equal(base.Add(-time.Second)) {
		t.Fatalf("three of three: %v, want the earliest %v", got, base.Add(-time.Second))
	}

	// This device's wall clock steps 55 hours ahead: the others' estimates follow the
	// monotonic clock, not this wall clock, so the cluster clock does not move.
	mono := 30 * time.Second
	got, _, _ = p.now(own.Add(55*time.Hour), mono, 3, true)
	if want := base.Add(mono - time.Second); !got.Equal(want) {
		t.Fatalf("after this clock's step: %v, want %v", got, want)
	}

	// A holder that is not a voter counts the voters it measured only.
	if _, _, ok := p.now(own, 0, 4, false); ok {
		t.Fatal("a non-voter with two of four voters measured: known")
	}

	// Samples older than clockSampleFresh do not count: alone again, not known.
	if _, _, ok := p.now(own, clockSampleFresh+time.Second, 3, true); ok {
		t.Fatal("known with stale samples only")
	}

	// Four voters, three of them fast (a majority: a median would follow them).
	p.keep(map[string]bool{"b": true, "c": true, "d": true})
	p.put("b", sample(6*time.Minute, 0))
	p.put("c", sample(9*time.Minute, 0))
	p.put("d", sample(-time.Minute, 0))
	if got, _, _ := p.now(base.Add(8*time.Minute), 0, 4, true); !got.Equal(base.Add(-time.Minute)) {
		t.Fatalf("four voters, three fast: %v, want the slow one's %v", got, base.Add(-time.Minute))
	}

	// A voter removed is forgotten.
	p.keep(map[string]bool{"b": true})
	if _, n := p.earliest(own, 0); n != 1 {
		t.Fatalf("%d samples after a removal, want 1", n)
	}
}
