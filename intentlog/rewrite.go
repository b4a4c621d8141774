package intentlog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// The rewrite guard (issue 38 item 3). Raft deletes a follower's log suffix when the
// leader's entries conflict with it, which Raft's safety promises never happens to a
// committed entry. It does when a voter's disk went back in time (a restored copy or a
// clone that helped elect a leader without an entry): the leader's history then
// differs from what this replica applied, and the chain key signed two histories.
// What cannot be prevented must be loud: the guard refuses to delete an applied
// entry (Raft's append then fails, and keeps failing, so the replica keeps its
// history) and halts the replica with a RewriteError that names the applied entries
// and the commits among them, the seqs the key signed twice.
//
// Compaction deletes a prefix and keeps the trailing logs (never up to the last
// index), and passes.

// RewriteError: the leader asked this replica to delete entries it had applied.
type RewriteError struct {
	From, To uint64   // the range Raft asked to delete
	Applied  uint64   // this replica's applied index
	Seqs     []uint64 // the commits among the applied entries in the range
}

func (e *RewriteError) Error() string {
	seqs := "none"
	if len(e.Seqs) > 0 {
		s := make([]string, len(e.Seqs))
		for i, q := range e.Seqs {
			s[i] = fmt.Sprint(q)
		}
		seqs = strings.Join(s, ", ")
	}
	return fmt.Sprintf("the Raft leader's history differs from this replica's: it asked to delete log entries %d-%d, "+
		"and %d-%d were already applied here (commit seqs %s: the chain key has signed two different commits for each). "+
		"Likely cause: a device restored from an older copy, or a clone, helped elect a leader without them. "+
		"This replica keeps its history and has stopped applying; export both chains (baton export) before repairing anything",
		e.From, e.To, e.From, e.Applied, seqs)
}

// ErrRewrite is what RewriteError matches with errors.Is.
var ErrRewrite = errors.New("intentlog: Raft asked to delete applied entries")

func (e *RewriteError) Is(target error) bool { return target == ErrRewrite }

// rewriteGuard is the LogStore Raft writes through, with the guard in DeleteRange.
type rewriteGuard struct {
	raft.LogStore
	fsm    *FSM
	verify CommitVerifier
}

func (g rewriteGuard) DeleteRange(min, max uint64) error {
	applied := g.fsm.View().AppliedIndex
	last, err := g.LogStore.LastIndex()
	if err != nil || max < last || min > applied {
		return g.LogStore.DeleteRange(min, max) // compaction (a prefix, trailing logs kept), or nothing applied in range
	}
	re := &RewriteError{From: min, To: max, Applied: applied}
	for i := min; i <= applied; i++ {
		var l raft.Log
		if g.LogStore.GetLog(i, &l) != nil || l.Type != raft.LogCommand {
			continue
		}
		if e, err := Decode(l.Data); err == nil {
			if c, ok := e.(CommitEntry); ok {
				if info, err := g.verify(c.Raw); err == nil {
					re.Seqs = append(re.Seqs, info.Seq)
				}
			}
		}
	}
	g.fsm.raise(&FaultError{File: RaftFile, Index: min, Halted: true, Err: re})
	return re
}
