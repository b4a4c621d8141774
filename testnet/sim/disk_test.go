package sim

import "testing"

// Issue 20 item 1 through the simulator's disk faults: with the knob unsealed-raft
// (raft.db as before the seals) a device starts on a flipped term and can vote and
// serve on it (corrupt_store); seed 11 (disk, 5 devices) goes on to a fork. Without
// the knob the same seeds refuse every such start and find nothing: the device is
// removed, repaired and joins again.
var diskCases = map[string]bugCase{
	"unsealed": {profile: "disk", knobs: Knobs{UnsealedRaft: true}, first: 11, seeds: 1,
		kinds: []string{VFork}},
	"sealed": {profile: "disk", first: 11, seeds: 8,
		kinds: []string{VCorruptStore, VFork, VLost, VPanic, VConverge}},
}

func TestFindsUnsealedRaft(t *testing.T) { findsBug(t, diskCases["unsealed"]) }

func TestNoCorruptStoreSealed(t *testing.T) { findsNoBug(t, diskCases["sealed"]) }
