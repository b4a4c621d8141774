package sim

import "testing"

// Issue 38 item 1 in the simulator: profile timetravel founds the cluster with dev0
// alone and restores devices from earlier copies of their data dirs, the mark beside
// the dir kept. With the knob fence-filters-only (the fence before 64cc35b, which only
// filtered Raft's messages) dev0 restored from its backup from before the others
// joined elects itself alone (its configuration names only itself: no message for
// the fence to refuse), claims and signs a second commit for a seq the others hold:
// a fork. About one seed in three finds it (5 or 6 of seeds 1-16 in four runs on
// 2026-12-07, among them 3, 7, 12 and 16 each time; which others moves with the
// goroutines' interleaving): 16 seeds miss it with a probability near 1e-3.
var timeTravelBug = bugCase{profile: "timetravel", knobs: Knobs{FenceFiltersOnly: true}, first: 1, seeds: 16,
	kinds: []string{VFork, VEquivocate}}

func TestFindsTimeTravelFork(t *testing.T) { findsBug(t, timeTravelBug) }

// The same seeds find nothing on the fixed code: the restored device is fenced and
// held until it has caught up.
func TestNoTimeTravelFork(t *testing.T) {
	c := timeTravelBug
	c.knobs = Knobs{}
	c.kinds = []string{VPanic, VFork, VLost, VEquivocate, VLiveness, VConverge}
	findsNoBug(t, c)
}

// TestTimeTravelWholeDiskLimit documents a known limit, not a bug this code claims
// to prevent: a whole-disk restore (profile timetravel-whole: the mark beside the
// data dir rolled back with it, or removed when the copy had none) leaves nothing on
// the device that says it went back in time. The members remember what each peer
// stored (issue 38 item 2, peer memory) and fence such a copy when one of them is
// reachable at its start; but the founder's backup from before anyone joined, so
// restored, knows no member to ask and its configuration names it alone: it elects
// itself and signs a second history, a fork found by about one seed in four (6 of
// seeds 1-24 on 2026-12-07 with peer memory; 7 with the knob no-peer-memory, 10 and 7
// before it was built). Documented in docs/DESIGN.md, "Repair, restore and backups".
func TestTimeTravelWholeDiskLimit(t *testing.T) {
	findsBug(t, bugCase{profile: "timetravel-whole", first: 1, seeds: 24, kinds: []string{VFork, VEquivocate, VOverlap}})
}

// TestCloneLimit documents another known limit of issue 38 item 4: a clone (profile
// timetravel-clone: a kept copy of a device's dir and its mark started beside the
// original with the same identity, some of the others reaching it) is detected by the
// members when it calls them as a second incarnation of the device (signer/node
// clone.go); a clone of the founder's pre-join backup knows no member and calls none,
// elects itself alone and claims an epoch another device holds: two holders
// (hold_overlap or epoch_reused; a fork when a forwarded submission reaches it): 4 of
// seeds 1-16 and 5 of 1-32 in two runs before clone detection, 7 of 1-32 after it
// (seed 5: the clone of the pre-join copy), on 2026-12-07. The checker tracks the clone's holds under its original's index, so
// an overlap between the two is counted as well. At about one seed in six, 32 seeds
// still miss it about once in 250 runs: with -long only.
func TestCloneLimit(t *testing.T) {
	if !*flagLong {
		t.Skip("the clone's known limit (issue 38 item 4) is found by about one seed in six: 32 seeds, too long and too flaky for every run; run with -long")
	}
	findsBug(t, bugCase{profile: "timetravel-clone", first: 1, seeds: 32, kinds: []string{VFork, VEquivocate, VOverlap, VEpochReuse}})
}
