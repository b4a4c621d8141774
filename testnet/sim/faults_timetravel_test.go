package sim

import "testing"

// Issue 38 item 1 in the simulator: profile timetravel founds the cluster with dev0
// alone and restores devices from earlier copies of their data dirs, the mark beside
// the dir kept. With the knob fence-filters-only (the fence before 64cc35b, which only
// filtered Raft's messages) dev0 restored from its backup from before the others
// joined elects itself alone (its configuration names only itself: no message for
// the fence to refuse), claims and signs a second commit for a seq the others hold:
// a fork. About one seed in three finds it (5 or 6 of seeds 1-16 in four runs on
// 2026-12-08, among them 3, 7, 12 and 16 each time; which others moves with the
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
// the device that says it went back in time, and the members do not yet remember
// what each peer acknowledged (issue 38 item 2, not built). The founder's backup from
// before anyone joined, so restored, elects itself alone and signs a second history:
// a fork (or two holds at once), found by about one seed in three (10 and 7 of seeds
// 1-24 in two runs on 2026-12-08, 4, 7, 12 and 16 in both): 24 seeds miss it with a
// probability near 1e-4. When item 2 is built this test must turn into a findsNoBug.
func TestTimeTravelWholeDiskLimit(t *testing.T) {
	findsBug(t, bugCase{profile: "timetravel-whole", first: 1, seeds: 24, kinds: []string{VFork, VEquivocate, VOverlap}})
}

// TestCloneLimit documents another known limit (issue 38 item 4, not built): a clone
// (profile timetravel-clone: a kept copy of a device's dir and its mark started beside
// the original with the same identity, some of the others reaching it) is not
// detected. A clone of the founder's pre-join backup elects itself alone and claims
// an epoch another device holds: two holders (hold_overlap or epoch_reused; a fork
// when a forwarded submission reaches it): 4 of seeds 1-16 and 5 of 1-32 in two runs
// on 2026-12-08. The checker tracks the clone's holds under its original's index, so
// an overlap between the two is counted as well. At about one seed in six, 32 seeds
// still miss it about once in 250 runs: with -long only.
func TestCloneLimit(t *testing.T) {
	if !*flagLong {
		t.Skip("the clone's known limit (issue 38 item 4) is found by about one seed in six: 32 seeds, too long and too flaky for every run; run with -long")
	}
	findsBug(t, bugCase{profile: "timetravel-clone", first: 1, seeds: 32, kinds: []string{VFork, VEquivocate, VOverlap, VEpochReuse}})
}
