package sim

import "testing"

// Issue 20 item 1 through the simulator's disk faults: with the knob unsealed-raft
// (raft.db as before the seals) a device starts on a flipped term and can vote and
// serve on it (corrupt_store); seed 7 (disk) goes on to a fork (seed 11 did until the
// lease entries' nudge went at once, 2026-12-03, which moved its schedule; with the knob,
// 215 of seeds 1-437 had violations, forks among them). Without the knob seeds 11-18 refuse
// every such start and find nothing: the device is removed, repaired and joins again.
var diskCases = map[string]bugCase{
	"unsealed": {profile: "disk", knobs: Knobs{UnsealedRaft: true}, first: 7, seeds: 1,
		kinds: []string{VFork}},
	"sealed": {profile: "disk", first: 11, seeds: 8,
		kinds: []string{VCorruptStore, VFork, VLost, VPanic, VConverge}},
}

func TestFindsUnsealedRaft(t *testing.T) { findsBug(t, diskCases["unsealed"]) }

func TestNoCorruptStoreSealed(t *testing.T) { findsNoBug(t, diskCases["sealed"]) }
