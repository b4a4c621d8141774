package intentlog

import (
	"runtime"
	"sync/atomic"
	"time"

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
// Nothing is committed that a majority has not written: the answer to an entry sent
// ahead is noted as the follower's acknowledgement of those entries in this term (for
// commit notices, and for Raft's replication as the pipeline's early answer below,
// which is what Raft's own AppendEntries of the same entries would have been told),
// its LeaderCommitIndex is the leader's commit index, which precedes the batch, and
// the leader counts itself only after its own write. A follower
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
	pre    *preverifier               // the leader's commits are checked while it writes them (preverify.go)
}

func (s aheadLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s aheadLogStore) StoreLogs(logs []*raft.Log) error {
	r := s.r.Load()
	if len(logs) == 0 || r == nil || r.State() != raft.Leader {
		yieldBeforeSync()
		return s.LogStore.StoreLogs(logs)
	}
	// Only the leader loop writes while the state is Leader (a follower's store runs
	// on the same goroutine, after it stepped down).
	if !s.off && s.n != nil {
		s.sendAhead(r, logs)
	}
	yieldBeforeSync() // the sends start now, not after the write
	if s.pre != nil {
		// After the yield: the check (an ed25519 verification) must not hold the
		// write back; it runs during it, on another P or after it.
		go s.pre.start(logs)
	}
	if s.before != nil {
		s.before(logs[0].Index, logs[len(logs)-1].Index)
	}
	return s.LogStore.StoreLogs(logs)
}

// yieldBeforeSync lets the goroutines made ready on this thread's P run before the
// caller blocks the thread in a write and its fsync. Go's scheduler leaves a P's next
// and queued goroutines behind a blocking system call until the call returns or its
// monitor (sysmon, which sleeps up to 10 ms when the process is idle) takes the P
// back; another P steals them only if it is idle and looking. The entries sent ahead,
// spawned just before the leader's write, waited for the write they were meant to
// overlap: in a graceful handover's trace they started 0.4-0.7 ms (median; p90
// 1.1-2.4 ms) after they were spawned, and 0.002-0.011 ms with this yield (p90
// 0.08-0.18; docs/BENCHMARKS.md as of 53ac444). Followers yield too, so that one rule covers every
// write (a follower's answer reaching its leader measured no change either way).
func yieldBeforeSync() { runtime.Gosched() }

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
	last := logs[len(logs)-1].Index
	for addr, a := range n.acks {
		if a.term != term || a.index < prev || n.busy[addr] != nil {
			continue
		}
		f := &inflight{term: term, last: last, done: make(chan struct{})}
		n.busy[addr] = f
		go n.ahead(a.id, addr, req, f)
	}
}

// leaderHeader is the header of the AppendEntries this node sends as the leader
// outside Raft's replication (commit notices, entries sent ahead).
func leaderHeader(rc *raft.Config, trans raft.Transport) raft.RPCHeader {
	addr := trans.EncodePeer(rc.LocalID, trans.LocalAddr())
	return raft.RPCHeader{ProtocolVersion: rc.ProtocolVersion, ID: []byte(rc.LocalID), Addr: addr}
}

// inflight is an AppendEntries sent ahead to one follower: in term, up to index last;
// done is closed once its answer is noted (or it failed).
type inflight struct {
	term, last uint64
	done       chan struct{}
}

// ahead sends req to target and notes a successful answer.
func (n *noticeTransport) ahead(id raft.ServerID, target raft.ServerAddress, req raft.AppendEntriesRequest, f *inflight) {
	var resp raft.AppendEntriesResponse
	err := n.Transport.AppendEntries(id, target, &req, &resp)
	if err == nil {
		n.note(id, target, &req, &resp)
	}
	n.mu.Lock()
	delete(n.busy, target)
	n.mu.Unlock()
	close(f.done)
}

// Answering Raft's replication from the answers sent ahead.
//
// Sending ahead saved the follower's write from the round, but not a message: Raft's
// replication still sends the same entries once the leader's write is done, and counts
// the follower toward the commit only on that answer. Where the leader's write ends
// more than a round trip after a follower's (a slow disk leading, a relay between
// them), that is one more round trip after the follower had answered the same entries;
// where the follower's ends last (the bench's three replicas on one disk) it costs
// nothing, and the early answer below measured no change there (docs/BENCHMARKS.md as of 53ac444). But
// a follower's successful answer, in term T, to an AppendEntries that reached index i
// says that its log then held the leader's entries up to i: the follower's Raft checked
// the term and the previous entry, and the leader never rewrites its own log within its
// term. That is all Raft's answer to its own AppendEntries for entries up to i could
// say; a late answer is one Raft must count as well. So when the replication pipelines
// an AppendEntries of term T up to index i to a follower that has acknowledged i in T
// (or whose answer to the entries sent ahead would cover it), the pipeline also hands
// Raft a success for it (ackedFuture) as soon as that acknowledgement is noted; the
// real AppendEntries still goes out (it tells the follower the commit index), and its
// answer reaches Raft as before: a refusal or a higher term still stops the pipeline.
// A success no later than one already passed on is dropped. The leader still counts
// itself only after its own write (hashicorp/raft's dispatchLogs), so nothing commits
// before a majority has written it. Only the pipeline (raft.NetworkTransport's, the
// simulator's) answers early; one AppendEntries at a time (replicateTo) does not.

// AppendEntries pipelines args and, when its entries are or will be acknowledged
// through the entries sent ahead, queues their success for Raft (see above).
func (p *noticePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f, err := p.AppendPipeline.AppendEntries(args, resp)
	if err != nil || !p.n.early || len(args.Entries) == 0 {
		return f, err
	}
	start, term, last := time.Now(), args.Term, lastIndex(args)
	pass := func() {
		a := &ackedFuture{start: start, req: args,
			resp: raft.AppendEntriesResponse{Term: term, LastLog: last, Success: true}}
		select {
		case p.acked <- a:
		case <-p.done:
		}
	}
	switch ok, wait := p.n.acked(p.target, term, last); {
	case ok || p.n.unacked:
		pass()
	case wait != nil:
		go func() {
			select {
			case <-wait:
			case <-p.done:
				return
			}
			if ok, _ := p.n.acked(p.target, term, last); ok {
				pass()
			}
		}()
	}
	return f, nil
}

// acked reports whether target has acknowledged, in term, an AppendEntries that reached
// index last; if not, and an AppendEntries sent ahead to it would, wait is closed once
// that one is answered.
func (n *noticeTransport) acked(target raft.ServerAddress, term, last uint64) (ok bool, wait <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a := n.acks[target]; a.term == term && a.index >= last {
		return true, nil
	}
	if f := n.busy[target]; f != nil && f.term == term && f.last >= last {
		return false, f.done
	}
	return false, nil
}

// lastIndex is the last index an AppendEntries reaches: its last entry's, or the
// previous entry's when it has none.
func lastIndex(req *raft.AppendEntriesRequest) uint64 {
	if k := len(req.Entries); k > 0 {
		return req.Entries[k-1].Index
	}
	return req.PrevLogEntry
}

// ackedFuture is a success Raft's replication receives from an acknowledgement noted
// before (see above).
type ackedFuture struct {
	start time.Time
	req   *raft.AppendEntriesRequest
	resp  raft.AppendEntriesResponse
}

func (f *ackedFuture) Error() error                          { return nil }
func (f *ackedFuture) Start() time.Time                      { return f.start }
func (f *ackedFuture) Request() *raft.AppendEntriesRequest   { return f.req }
func (f *ackedFuture) Response() *raft.AppendEntriesResponse { return &f.resp }
