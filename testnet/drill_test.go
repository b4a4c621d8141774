package testnet

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuf is a goroutine-safe progress sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runDrillTest(t *testing.T, name string) Report {
	t.Helper()
	return runDrillTestFormat(t, name, "")
}

func runDrillTestFormat(t *testing.T, name, format string) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress syncBuf
	ic := inspectFor(format)
	rep, err := RunScenario(ctx, DrillConfig{Scenario: name, Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond,
		Rounds: 1, Seed: 1, Dir: t.TempDir(), Progress: &progress, Format: format, Inspect: ic.inspect})
	if err != nil {
		t.Fatal(err)
	}
	defer ic.check(t, rep)
	if testing.Verbose() || !rep.OK {
		t.Logf("progress:\n%s", progress.String())
	}
	if rep.Error != "" {
		t.Fatalf("drill error: %s", rep.Error)
	}
	c := rep.Check
	if c.Forks != 0 || c.Lost != 0 || c.Dupes != 0 || c.Invalid != 0 || !rep.OK {
		t.Fatalf("checker: forks %d lost %d dupes %d invalid %d: %v", c.Forks, c.Lost, c.Dupes, c.Invalid, c.Findings)
	}
	if c.Acked == 0 || rep.Counts.Acked != c.Acked || c.Commits == 0 {
		t.Fatalf("no load checked: counts %+v, acked %d, commits %d", rep.Counts, c.Acked, c.Commits)
	}
	if !c.RaftRead || c.Signed < c.Commits || c.Unverified != 0 {
		t.Fatalf("raft logs: read %v, signed %d < commits %d, unverified %d", c.RaftRead, c.Signed, c.Commits, c.Unverified)
	}
	if c.Equivocations > 0 {
		t.Fatalf("%d equivocation(s): two signed commits for one (seq, epoch)", c.Equivocations)
	}
	if len(rep.Rounds) == 0 || rep.Summary.Faults != len(rep.Rounds) {
		t.Fatalf("rounds %d, summary %+v", len(rep.Rounds), rep.Summary)
	}
	if len(rep.Holds) == 0 || len(rep.Growth) == 0 || len(rep.Devices) < 3 {
		t.Fatalf("timeline empty: holds %d growth %d devices %d", len(rep.Holds), len(rep.Growth), len(rep.Devices))
	}
	return rep
}

func failoverTo(t *testing.T, rep Report, max time.Duration) {
	t.Helper()
	if len(rep.Check.Failovers) == 0 {
		t.Fatal("no failover in the chain")
	}
	for _, f := range rep.Check.Failovers {
		if f.ToEpoch <= f.FromEpoch {
			t.Errorf("failover epochs %d -> %d", f.FromEpoch, f.ToEpoch)
		}
		if f.Duration > max || f.SinceFault > max {
			t.Errorf("failover %d->%d took %s, %s after %q (bound %s)", f.FromEpoch, f.ToEpoch, f.Duration, f.SinceFault, f.Fault, max)
		}
	}
}

func hasEvent(t *testing.T, rep Report, kind string) {
	t.Helper()
	for _, e := range rep.Events {
		if e.Kind == kind {
			return
		}
	}
	t.Errorf("no %s event on the timeline", kind)
}

// Bounds below are the DESIGN promises (TTL + tick + a Raft election; 2×TTL with
// skew) plus slack for a shared 2-core machine under -race.

func TestDrillKillHolder(t *testing.T) {
	rep := runDrillTest(t, "kill-holder")
	failoverTo(t, rep, 5*time.Second)
	hasEvent(t, rep, EventKill)
	hasEvent(t, rep, EventRestart)
}

func TestDrillPauseHolder(t *testing.T) {
	rep := runDrillTest(t, "pause-holder")
	failoverTo(t, rep, 5*time.Second)
	hasEvent(t, rep, EventPause)
	hasEvent(t, rep, EventResume)
	// A proposal caught in flight at the pause goes out at resume, after the lease
	// moved on: the apply must have refused it.
	for _, e := range rep.Events {
		if e.Kind == EventResume && strings.Contains(e.Label, "parked") {
			if rep.Rejections["epoch_mismatch"]+rep.Rejections["not_holder"]+rep.Rejections["stale_rev"] == 0 {
				t.Fatalf("stale proposals went out at resume (%q) but the apply refused none: %v", e.Label, rep.Rejections)
			}
			return
		}
	}
	t.Log("no proposal was caught in flight this time")
}

func TestDrillPartitionHolder(t *testing.T) {
	rep := runDrillTest(t, "partition-holder")
	failoverTo(t, rep, 5*time.Second)
	hasEvent(t, rep, EventPartition)
	hasEvent(t, rep, EventHeal)
}

func TestDrillSkew(t *testing.T) {
	rep := runDrillTest(t, "skew")
	failoverTo(t, rep, 6*time.Second)
	hasEvent(t, rep, EventSkew)
}

func TestDrillRollingRestart(t *testing.T) {
	rep := runDrillTest(t, "rolling-restart")
	failoverTo(t, rep, 5*time.Second)
	hasEvent(t, rep, EventStop)
}

func TestDrillReleaseHandover(t *testing.T) {
	rep := runDrillTest(t, "release-handover")
	// A release or transfer hands over within a few Raft round trips.
	failoverTo(t, rep, 2*time.Second)
	hasEvent(t, rep, EventRelease)
}

func TestDrillChurn(t *testing.T) {
	rep := runDrillTest(t, "churn")
	hasEvent(t, rep, EventJoin)
	hasEvent(t, rep, EventLeave)
	if len(rep.Devices) != 3 {
		t.Fatalf("devices %d, want 3 (the slot that left rejoined)", len(rep.Devices))
	}
}

func TestLookupScenario(t *testing.T) {
	if _, err := LookupScenario("nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	for _, n := range ScenarioNames() {
		if _, err := LookupScenario(n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDrillLoad is the fault-free load drill: every device submits at once, and
// every commit the chain key signs must be applied. It failed on the old commit path
// (the holder signed on a prediction of the pending queue; interleaved entries from
// other devices made it sign a second commit for one seq).
func TestDrillLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress syncBuf
	rep, err := RunScenario(ctx, DrillConfig{Scenario: "load", Rounds: 1, Seed: 1, LoadRate: 100, Dir: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Check
	if !rep.OK || c.Equivocations != 0 || c.Refused != 0 {
		t.Fatalf("fault-free load: equivocations %d, signed-but-refused %d, rejections %v\n%s", c.Equivocations, c.Refused, rep.Rejections, progress.String())
	}
	if c.Signed != c.Commits+c.Late || c.Acked == 0 {
		t.Fatalf("signed %d, applied %d, late %d, acked %d", c.Signed, c.Commits, c.Late, c.Acked)
	}
}

// TestDrillHoldsReachTheEnd: the report's window ends when the drill stopped
// its devices to read them, so the last hold bar reaches the end of the timeline
// (it stopped short while the checker ran).
func TestDrillHoldsReachTheEnd(t *testing.T) {
	rep := runDrillTest(t, "release-handover")
	var last time.Time
	for _, h := range rep.Holds {
		if h.To.After(last) {
			last = h.To
		}
	}
	if gap := rep.Finished.Sub(last); gap > 2*DefaultSampleEvery {
		t.Fatalf("the last hold ends %s before the report's end", gap)
	}
}
