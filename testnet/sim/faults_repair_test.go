package sim

import "testing"

// Issue 20 item 3 in the simulator: with the knob rebootstrap (a device that lost its
// Raft log bootstraps as configured, as before the fix), a repaired or restored
// founder's restart is refused ("already has a history"; every simulated device
// founds the cluster) and the run does not converge. On the old behaviour about one
// repair seed in six finds it; these are seeds that did.
var repairFounderBug = bugCase{profile: "repair", knobs: Knobs{Rebootstrap: true}, first: 3, seeds: 9,
	kinds: []string{VPanic}}

func TestFindsRepairFounderBug(t *testing.T) { findsBug(t, repairFounderBug) }

// The same seeds find nothing on the fixed code.
func TestNoRepairBugs(t *testing.T) {
	c := repairFounderBug
	c.knobs = Knobs{}
	c.kinds = []string{VPanic, VFork, VLost, VLiveness, VConverge}
	findsNoBug(t, c)
}
