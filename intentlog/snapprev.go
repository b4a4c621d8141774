package intentlog

import (
	"errors"

	"github.com/hashicorp/raft"
)

// snapPrevLogs is the log store Raft reads, answering for the last entry of the newest
// snapshot when the log does not hold it.
//
// hashicorp/raft v1.7.3's follower checks an AppendEntries' previous entry against
// its own log only: against its last entry, or an entry the log holds. A follower that
// caught up by snapshot holds neither once it has appended past the snapshot, so it
// refuses every AppendEntries that starts right after the snapshot; a leader sends
// exactly that when the answer to its first one after the snapshot was lost (a slow
// link: the request timed out at the leader while the follower stored it). The leader
// then walks back, sends the snapshot again, and the follower never catches up
// (docs/DRILLS.md, seeds 401657, 680209 and 690374; hashicorp/raft issue #205). The Raft
// paper's rule is that a snapshot's last index and term stand for that entry, and
// that is what GetLog answers here: an entry with the snapshot's index and term.
//
// The answer is a placeholder (a no-op), so it must never be read as the entry
// itself. It is given only when the entry just below is missing too: a leader reads
// entries to send them only upwards from one it holds (or from its snapshot's index
// + 1), so it never reaches the placeholder, and Raft applies only entries above the
// snapshot. What remains is the follower's check of the previous entry's term, and of
// a new entry's term against the one it holds: the paper's rule.
type snapPrevLogs struct {
	raft.LogStore
	snaps raft.SnapshotStore
}

func (s snapPrevLogs) GetLog(index uint64, l *raft.Log) error {
	err := s.LogStore.GetLog(index, l)
	if !errors.Is(err, raft.ErrLogNotFound) || index < 2 {
		return err
	}
	metas, lerr := s.snaps.List() // newest first; only on a miss, which is rare
	if lerr != nil || len(metas) == 0 || metas[0].Index != index {
		return err
	}
	var below raft.Log
	if berr := s.LogStore.GetLog(index-1, &below); !errors.Is(berr, raft.ErrLogNotFound) {
		return err
	}
	*l = raft.Log{Index: index, Term: metas[0].Term, Type: raft.LogNoop}
	return nil
}
