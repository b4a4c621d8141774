package intentlog

import (
	"errors"
	"fmt"
)

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

// FaultError is a fault of this replica's storage, as Log.Fault reports it. It unwraps
// to the cause: ErrCorrupt for corruption, or the I/O error of a failed write.
//
// Halted: the FSM stopped applying (corruption: an entry in raft.db, or a stored value
// in state.db, no longer verifies). Nothing further is applied, the applied index stays
// where it was, proposals through this Log fail with this error, and Raft leadership is
// given up; the other replicas carry on. Restarting does not help (the bytes stay
// corrupt): repair the device (baton repair, see Repair) so it resyncs from the others.
//
// Not halted: a transient fault (a write to state.db failed: a full disk, an I/O
// error). The apply retries with a bounded backoff and nothing is lost or skipped;
// the fault clears once a write succeeds.
type FaultError struct {
	File   string // RaftFile or StateFile
	Index  uint64 // the Raft index of the entry being applied (0 if none)
	Key    string // for state.db: the bucket/key whose value is corrupt
	Halted bool
	Err    error
}

func (e *FaultError) Error() string {
	var rw *RewriteError
	switch {
	case errors.As(e.Err, &rw):
		return rw.Error()
	case e.Halted && e.File == RaftFile:
		return fmt.Sprintf("%s: log entry at index %d is corrupt: %v; this replica has stopped applying (the other replicas' copies are most likely fine): run baton repair to resync it from them", e.File, e.Index, e.Err)
	case e.Halted:
		return fmt.Sprintf("%s: stored value %s is corrupt (applying index %d): %v; this replica has stopped applying: run baton repair to resync it from the others", e.File, e.Key, e.Index, e.Err)
	}
	return fmt.Sprintf("%s: cannot write: %v (applying index %d; retrying)", e.File, e.Err, e.Index)
}

func (e *FaultError) Unwrap() error { return e.Err }
