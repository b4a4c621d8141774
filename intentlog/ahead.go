package intentlog

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Sending ahead: the leader's new entries go to its followers while it writes them.
//
// hashicorp/raft's leader writes and fsyncs a batch of entries to its own log before
// it triggers replication (dispatchLogs), so a round is the leader's write, then each
// follower's, in series. Raft does not need that order (Ongaro's thesis, 10.2.1: the
// leader may write its log in parallel with replicating it, and counts itself toward
// a commit only once its own write is done; hashicorp/raft's commitment does the
// latter whatever we do, since it marks the leader's match index after the write).
// So when the leader's Raft hands a batch to its log store, aheadLogStore first sends
// it, as an AppendEntries of the leader's term with the entries, to each follower that
// has acknowledged in this term the entry before the batch, and then writes it. The
// follower's own Raft handles it as any AppendEntries from its leader: it refuses an
// older term or a log that lacks the previous entry, and otherwise stores the entries
// (a duplicate is skipped) and answers. When the leader's replication then sends the
// same entries, the follower finds them stored and answers at once: the round is the
// longer of the two writes instead of their sum.
//
// Nothing is committed earlier than Raft decides: the answer to an entry sent ahead
// goes to the sender, never into Raft's replication state (it is noted for commit
// notices only: the follower did acknowledge those entries in this term), and its
// LeaderCommitIndex is the leader's commit index, which precedes the batch. A follower
// may hold an entry the leader never wrote (its write failed, or it crashed first):
// such an entry is uncommitted, as one a leader replicated to a single follower before
// it crashed, and Raft's election rules treat it so. At most one AppendEntries sent
// ahead is in flight per follower; a batch that finds one in flight is not sent ahead
// (Raft's replication carries it as before).

// aheadLogStore is the leader's log store as Raft sees it (log.go), sending each batch
// the leader appends ahead to the followers (see above).
type aheadLogStore struct {
	raft.LogStore
	n      *noticeTransport
	off    bool                       // knobs.Intentlog.NoSendAhead: Raft's order
	r      *atomic.Pointer[raft.Raft] // set once Raft runs
	header raft.RPCHeader             // the leader's (leaderHeader)
	before func(first, last uint64)   // a test's hook (knobs.Intentlog.BeforeLeaderStore), after the sends
}

func (s aheadLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s aheadLogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) > 0 {
		if r := s.r.Load(); r != nil && r.State() == raft.Leader {
			// Only the leader loop writes while the state is Leader (a follower's
			// store runs on the same goroutine, after it stepped down).
			if !s.off {
				s.sendAhead(r, logs)
			}
			if s.before != nil {
				s.before(logs[0].Index, logs[len(logs)-1].Index)
			}
		}
	}
	return s.LogStore.StoreLogs(logs)
}

// sendAhead sends logs to every follower that acknowledged, in the leader's current
// term, the entry before them, on a goroutine each.
func (s aheadLogStore) sendAhead(r *raft.Raft, logs []*raft.Log) {
	term, prev := r.CurrentTerm(), logs[0].Index-1
	if prev == 0 || logs[0].Term != term {
		return
	}
	var pe raft.Log
	if err := s.LogStore.GetLog(prev, &pe); err != nil {
		return
	}
	req := raft.AppendEntriesRequest{
		RPCHeader:         s.header,
		Term:              term,
		PrevLogEntry:      prev,
		PrevLogTerm:       pe.Term,
		Entries:           logs,
		LeaderCommitIndex: min(r.CommitIndex(), prev),
	}
	req.Leader = req.Addr
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for addr, a := range n.acks {
		if a.term != term || a.index < prev || n.busy[addr] {
			continue
		}
		n.busy[addr] = true
		go n.ahead(a.id, addr, req)
	}
}

// leaderHeader is the header of the AppendEntries this node sends as the leader
// outside Raft's replication (commit notices, entries sent ahead).
func leaderHeader(rc *raft.Config, trans raft.Transport) raft.RPCHeader {
	addr := trans.EncodePeer(rc.LocalID, trans.LocalAddr())
	return raft.RPCHeader{ProtocolVersion: rc.ProtocolVersion, ID: []byte(rc.LocalID), Addr: addr}
}

// ahead sends req to target and notes a successful answer.
func (n *noticeTransport) ahead(id raft.ServerID, target raft.ServerAddress, req raft.AppendEntriesRequest) {
	var resp raft.AppendEntriesResponse
	err := n.Transport.AppendEntries(id, target, &req, &resp)
	if err == nil {
		n.note(id, target, &req, &resp)
	}
	n.mu.Lock()
	delete(n.busy, target)
	n.mu.Unlock()
}
