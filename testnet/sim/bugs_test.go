package sim

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The simulator must go on finding the three bugs it was shown to find on this
// branch's code (issue 11, deliverable 3). Each test runs a fixed set of seeds of a
// profile made to exercise the bug, with the knob that puts the bug back once it is
// fixed, and fails if no seed finds it.
//
// On this branch no knob is wired yet (KnobsWired is false): the tests run the code
// as it is, where bugs (b) and (c) are still present. Bug (a) has no knob: once the
// signer's commit path is fixed, TestFindsBugA needs one (see the report: a
// signer.LoopConfig knob that signs on a predicted queue again) or goes.

type bugCase struct {
	profile string
	knobs   Knobs
	first   int64
	seeds   int
	dur     time.Duration // 0: the profile's
	kinds   []string      // any of these violations is the bug
}

var bugCases = map[string]bugCase{
	// (a) Under ordinary load from every device, no faults, a holder that leads Raft
	// signs on its prediction of the pending queue; another device's intents entry
	// lands first, the apply refuses the commit (bad_ops), and the loop signs a
	// different commit for the same seq. About 40% of calm seeds (5 s) find it.
	"a": {profile: "calm", first: 1, seeds: 16, dur: 5 * time.Second, kinds: []string{VEquivocate}},
	// (b) A renewal proposed inside the holder's window lands after a standby's read
	// barrier; the standby's claim compares only the epoch and wins; both hold. About
	// 60-80% of laterenew seeds (30 s, ten such races) find it.
	"b": {profile: "laterenew", knobs: Knobs{EpochOnlyClaim: true}, first: 1, seeds: 8,
		kinds: []string{VLiveTake, VOverlap}},
	// (c) A retried ID is applied a second time once more IDs than the count-only
	// dedupe window holds have passed.
	"c": {profile: "dedupe-small", knobs: Knobs{DedupeCount: 64}, first: 1, seeds: 4, kinds: []string{VDuplicate}},
}

// findsBug runs c's seeds in worker processes (as TestSim does: a seed it names
// replays) and reports the seeds that found the bug.
func findsBug(t *testing.T, c bugCase) {
	if raceEnabled {
		// Ten times slower and no data race to find that TestSim's seeds would miss:
		// these run in `go test ./testnet/sim` (no -race).
		t.Skip("skipped under -race")
	}
	o := SearchOptions{Base: Config{Profile: c.profile, Duration: c.dur, Knobs: c.knobs}, First: c.first, Seeds: c.seeds}
	sum := searchInWorkers(context.Background(), o)
	var seeds []int64
	var first string
	for _, seed := range sortedSeeds(sum.Results) {
		res := sum.Results[seed]
		for _, v := range res.Violations {
			if slices.Contains(c.kinds, v.Kind) {
				if first == "" {
					first = v.Report(res.Config)
				}
				seeds = append(seeds, seed)
				break
			}
		}
	}
	if len(seeds) == 0 {
		t.Fatalf("none of seeds %d..%d (profile %s, knobs %q) found %v:\n%s", c.first, c.first+int64(c.seeds)-1,
			c.profile, c.knobs, c.kinds, sum)
	}
	t.Logf("found by %d of %d seeds: %v; the first:\n%s", len(seeds), c.seeds, seeds, first)
}

func TestFindsBugA(t *testing.T) { findsBug(t, bugCases["a"]) }

func TestFindsBugB(t *testing.T) { findsBug(t, bugCases["b"]) }

// TestFindsBugC needs the knob (a small count-only window); without it, the bug
// takes more than intentlog.DedupeWindow (65,536) intents to show: -long runs that
// (the dedupe profile, one seed, about a minute).
func TestFindsBugC(t *testing.T) {
	switch {
	case KnobsWired:
		findsBug(t, bugCases["c"])
	case *flagLong:
		findsBug(t, bugCase{profile: "dedupe", first: 1, seeds: 1, kinds: []string{VDuplicate}})
	default:
		t.Skip("needs the dedupe-count knob (KnobsWired) or -long")
	}
}
