package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/batonhq/baton/signer/node"
)

// Knobs re-introduce fixed bugs for one run, so that a test can show the simulator
// still finds them. They mirror internal/knobs.Intentlog on the state machine's
// branch: every replica of a run gets the same knobs (they change the apply).
//
// On this branch the knobs cannot be set yet (no node or intentlog field takes
// them), and they do not need to be: the code still has both bugs. applyKnobs says
// so (KnobsWired is false); once the hook exists it sets it, and the tests that turn
// a knob on keep finding the bug on the fixed code.
type Knobs struct {
	// EpochOnlyClaim: a claim's compare-and-set checks only the epoch, not the
	// record's revision (bug b: a renewal landing after the claimant's read barrier
	// no longer makes the claim lose).
	EpochOnlyClaim bool
	// DedupeCount > 0: the dedupe window is a count of IDs, not a retention period
	// (bug c: a retry after DedupeCount other IDs is applied a second time).
	DedupeCount int
}

// KnobsWired reports whether applyKnobs can pass knobs to the code under test. While
// it is false a run with knobs runs the code as it is (which, on this branch, still
// has the bugs the knobs put back).
const KnobsWired = false

// applyKnobs sets k on one device's node configuration.
//
// Hook wanted (see the report): node.Knobs.Intentlog *knobs.Intentlog, passed to
// intentlog.Config.Knobs. Then this becomes
//
//	cfg.Knobs.Intentlog = &knobs.Intentlog{EpochOnlyClaim: k.EpochOnlyClaim, DedupeCount: k.DedupeCount}
func applyKnobs(k Knobs, cfg *node.Config) {
	_ = cfg
}

// String is the form ParseKnobs reads: "epoch-only-claim,dedupe-count=64" ("" for
// none).
func (k Knobs) String() string {
	var parts []string
	if k.EpochOnlyClaim {
		parts = append(parts, "epoch-only-claim")
	}
	if k.DedupeCount > 0 {
		parts = append(parts, fmt.Sprintf("dedupe-count=%d", k.DedupeCount))
	}
	return strings.Join(parts, ",")
}

// ParseKnobs reads a comma-separated knob list (see Knobs.String).
func ParseKnobs(s string) (Knobs, error) {
	var k Knobs
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		name, val, _ := strings.Cut(p, "=")
		switch name {
		case "":
		case "epoch-only-claim":
			k.EpochOnlyClaim = true
		case "dedupe-count":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return Knobs{}, fmt.Errorf("sim: knob dedupe-count needs a positive count, got %q", val)
			}
			k.DedupeCount = n
		default:
			return Knobs{}, fmt.Errorf("sim: unknown knob %q (have epoch-only-claim, dedupe-count=N)", name)
		}
	}
	return k, nil
}
