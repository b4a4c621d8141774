// Package knobs holds test-only switches that re-introduce old behaviour, so that a
// simulator can prove it finds the bugs they stood for. Production code takes them
// through a pointer field in its Config whose type lives here; this package is
// internal, so code outside the baton module cannot construct one, and nil (the only
// value it can pass) means production behaviour.
//
// Every knob that changes the replicated apply must be set identically on every
// replica of a test cluster: like the apply's limits, it is part of the state machine.
package knobs

import "context"

// Intentlog changes package intentlog's apply.
type Intentlog struct {
	// EpochOnlyClaim makes a claim compare only the epoch (Epoch == stored epoch + 1),
	// not the stored record's revision: a renewal applied after the claimant read the
	// record no longer makes the claim lose (the late-renewal split brain).
	EpochOnlyClaim bool
	// DedupeCount > 0 restores the count-only dedupe window: once more than
	// DedupeCount IDs are remembered the oldest is forgotten, whatever its age and
	// even if it is still pending (a retry of it is then queued a second time).
	DedupeCount int
	// UnsealedRaftLog opens raft.db without the seals of every entry and of Raft's
	// term and vote (issue 20 item 1): a flipped term passes the start check. Set
	// from a run's start, the file is never sealed.
	UnsealedRaftLog bool
	// UnboundedLogTime restores the version-2 log time rule for every entry: log time
	// jumps to any later timestamp, however far ahead (a clock days fast makes the
	// dedupe window forget acknowledged IDs).
	UnboundedLogTime bool
	// SharedStamp applies the version-3 log time rule to version-4 entries: each step
	// is measured from the last stamp whoever wrote it, so every handover from a slow
	// clock to a fast one moves log time a bounded step (the simulator's profile
	// flapping then finds acknowledged IDs applied twice).
	SharedStamp bool
	// BarrierNudges: the leader's nudge is always a barrier entry, never a commit
	// notice (intentlog/notice.go), as over a transport that cannot send notices. Not
	// a bug: the fallback path, which a run can still cover.
	BarrierNudges bool
	// NoSendAhead: the leader writes a batch to its own log before its followers get
	// it (hashicorp/raft's order), instead of sending it ahead to them while it writes
	// (intentlog/ahead.go), and Raft's replication counts a follower only on the answer
	// to its own AppendEntries. Not a bug: the path a transport without notices takes.
	NoSendAhead bool
	// EarlyUnacked: Raft's replication counts a follower as soon as it pipelines an
	// AppendEntries to it, before any answer (a bug: intentlog/ahead.go counts only a
	// follower that acknowledged the entries in the leader's term). The simulator's
	// bug case (f) shows it finds that.
	EarlyUnacked bool
	// BeforeLeaderStore, when set, is called on the leader after a batch was sent
	// ahead and before the leader writes it (a test holds the write there).
	BeforeLeaderStore func(first, last uint64)
}

// Election changes package election's Lease.
type Election struct {
	// UnclampedStamps: lease and commit stamps follow the wall clock however far it
	// stepped ahead (no Lease.Stamp clamp); with Intentlog.UnboundedLogTime it puts
	// issue 19 item 2 back whole.
	UnclampedStamps bool
}

// Node holds the test hooks of package signer/node.
type Node struct {
	// BeforePropose is called before every proposal the node makes (intents, lease
	// entries, genesis and commits; e is the intentlog.Entry); it may block (testnet
	// freezes a device mid-flight) and returns the context the proposal goes on with
	// (ctx, or one whose deadline moved by the time a frozen device stood still).
	BeforePropose func(ctx context.Context, e any) context.Context
	// Intentlog is passed to the node's intent log.
	Intentlog *Intentlog
	// Signer is passed to the node's signer loop (and SkipValidation also skips the
	// node's own entrance checks).
	Signer *Signer
	// Election is passed to the node's lease.
	Election *Election
	// NoFence turns off the catch-up fence (signer/node fence.go): a device that lost
	// its Raft log votes and campaigns at once (issue 20 item 2, put back).
	NoFence bool
	// Rebootstrap: a device with an empty Raft log bootstraps as configured even when
	// it lost the log it had (issue 20 item 3, put back: the founder's restart after a
	// repair is refused).
	Rebootstrap bool
	// FenceFiltersOnly: the fence only filters Raft's messages (issue 38 item 1, put
	// back): a fenced device's Raft still campaigns (a configuration naming it alone
	// elects it with no message sent) and its signer loop still claims and signs.
	FenceFiltersOnly bool
	// NoPeerMemory: a starting device does not ask the members what they remember
	// of it (issue 38 item 2, put back): a restore that rolled back the mark too is
	// not recognised.
	NoPeerMemory bool
}
