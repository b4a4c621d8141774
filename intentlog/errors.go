package intentlog

import "errors"

// Sentinel errors. Match them with errors.Is; the returned errors may wrap them.
var (
	// ErrNotLeader: Propose or ApplyEncoded was called on a node that is not the Raft
	// leader. Log.Leader names the known leader, if any, to forward to.
	ErrNotLeader = errors.New("intentlog: not the raft leader")
	// ErrLeadershipLost: leadership was lost after the entry was handed to Raft; the
	// entry may or may not be committed. Retry with the same intent IDs (they dedupe).
	ErrLeadershipLost = errors.New("intentlog: leadership lost, outcome unknown")
	// ErrClosed: the Log was closed (or Raft shut down).
	ErrClosed = errors.New("intentlog: closed")
	// ErrNotFound: no such commit or record.
	ErrNotFound = errors.New("intentlog: not found")
	// ErrAlreadyBootstrapped: Bootstrap was called on a node that already has state.
	ErrAlreadyBootstrapped = errors.New("intentlog: already bootstrapped")
	// ErrTimeout: the context's deadline passed while waiting for Raft to commit and
	// apply the entry (the entry may still be applied later).
	ErrTimeout = errors.New("intentlog: timed out waiting for apply")
	// ErrEntryTooLarge: an encoded entry exceeds MaxEntryBytes.
	ErrEntryTooLarge = errors.New("intentlog: entry too large")
	// ErrMalformed: bytes that do not decode as an entry, result or snapshot.
	ErrMalformed = errors.New("intentlog: malformed encoding")
	// ErrCorrupt: bytes that were checksummed when written no longer verify (a flipped
	// bit, a torn write). Unlike ErrMalformed it says nothing about the proposer: the
	// other replicas' copies are most likely fine, so this replica must stop rather
	// than apply (or reject) something they did not.
	ErrCorrupt = errors.New("intentlog: corrupt data (checksum mismatch)")
	// ErrInconsistentState: state.db holds applied entries but the Raft store and
	// snapshots are empty (raft.db was lost or replaced). Replaying a log over such a
	// state could silently diverge, so Open refuses; remove state.db to rejoin.
	ErrInconsistentState = errors.New("intentlog: applied state without raft state")
	// ErrBadConfig: Open was given an invalid Config.
	ErrBadConfig = errors.New("intentlog: invalid config")
)
