package intentlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Commit notices: the leader tells its followers its commit index without a log entry.
//
// A follower applies an entry only when an AppendEntries tells it the entry is
// committed. hashicorp/raft sends one without new entries only every CommitTimeout
// (its heartbeats carry no commit index), so the nudge (nudge.go) appended a barrier:
// one more entry, written and fsynced by the leader and then by each follower before
// the follower applied (1.5–3 ms per handover step on the bench's machine). A notice
// is the AppendEntries Raft itself sends on CommitTimeout, sent at once: no entries,
// PrevLogEntry and LeaderCommitIndex both the leader's commit index c, PrevLogTerm the
// term of its entry at c, the leader's current term and address. Raft's own handler
// on the follower does the rest: it refuses an older term; it refuses unless its log
// holds entry c with that term, and then (Log Matching) its log equals the leader's
// up to c, every entry of which is committed; it commits min(c, its last index) = c.
// So a notice can only make a follower apply what is committed, in order, as a late
// or duplicated AppendEntries from the same leader could; a refused one changes
// nothing the leader's Raft would notice (its answer goes to the notice, not to
// Raft's replication). It is sent to a member only once it acknowledged, in this
// term, an AppendEntries that reached index c (a follower that lacks the entry would
// only refuse it, with a warning in its log), waiting for that up to noticeWait; a
// notice that cannot be sent falls back to the barrier.

// ack is what a follower last acknowledged: the leader's term and the last index the
// acknowledged AppendEntries covered (and the follower's server ID, to send to it).
type ack struct {
	term, index uint64
	id          raft.ServerID
}

// noticeTransport is the transport Raft runs on, with the followers' acknowledgements
// remembered for commit notices and its pipelines' answers drained (noticePipeline).
// It keeps the optional interfaces raft looks for (pre-vote, close); wrapNotice wraps
// only a transport that has both.
type noticeTransport struct {
	raft.Transport
	mu   sync.Mutex
	acks map[raft.ServerAddress]ack
	wake chan struct{}                    // closed at the next acknowledgement (made by a waiting notice)
	busy map[raft.ServerAddress]*inflight // an AppendEntries sent ahead (ahead.go) is in flight
	// early: Raft's replication is answered from the answers to the entries sent
	// ahead (ahead.go); off with knobs.Intentlog.NoSendAhead.
	early   bool
	unacked bool // knobs.Intentlog.EarlyUnacked: a bug, for the simulator's bug case
}

type fullTransport interface {
	raft.Transport
	raft.WithPreVote
	raft.WithClose
}

var _ fullTransport = (*noticeTransport)(nil)

// wrapNotice returns t wrapped for notices, or t and nil when t lacks an optional
// interface the wrapper would have to pretend to have.
func wrapNotice(t raft.Transport) (raft.Transport, *noticeTransport) {
	if _, ok := t.(fullTransport); !ok {
		return t, nil
	}
	n := &noticeTransport{Transport: t, acks: map[raft.ServerAddress]ack{}, busy: map[raft.ServerAddress]*inflight{}}
	return n, n
}

func (n *noticeTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return n.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func (n *noticeTransport) Close() error { return n.Transport.(raft.WithClose).Close() }

// note remembers a successful answer to req from target.
func (n *noticeTransport) note(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if !resp.Success {
		return
	}
	last := lastIndex(req)
	n.mu.Lock()
	if a := n.acks[target]; req.Term > a.term || (req.Term == a.term && last > a.index) {
		n.acks[target] = ack{term: req.Term, index: last, id: id}
		if n.wake != nil {
			close(n.wake)
			n.wake = nil
		}
	}
	n.mu.Unlock()
}

func (n *noticeTransport) forget(target raft.ServerAddress) {
	n.mu.Lock()
	delete(n.acks, target)
	n.mu.Unlock()
}

func (n *noticeTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := n.Transport.AppendEntries(id, target, args, resp)
	if err == nil {
		n.note(id, target, args, resp)
	}
	return err
}

func (n *noticeTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := n.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return n.drain(p, id, target), nil
}

// drain returns p with its answers drained and noted (noticePipeline).
func (n *noticeTransport) drain(p raft.AppendPipeline, id raft.ServerID, target raft.ServerAddress) *noticePipeline {
	np := &noticePipeline{AppendPipeline: p, n: n, id: id, target: target, out: make(chan raft.AppendFuture),
		acked: make(chan *ackedFuture), done: make(chan struct{})}
	go np.run()
	return np
}

// noticePipeline passes a pipeline's answers on to Raft, noting each, and keeps
// reading them whether or not Raft still does.
//
// hashicorp/raft v1.7.3's pipelined replication stops reading answers when a follower
// answers with a higher term (pipelineDecode returns), but its sending loop goes on
// until it next looks at its channels. Each send waits for room among the requests in
// flight, which only an answer taken off the connection makes; with nobody taking
// them, once the answers queue (128) and the requests in flight (128) are full,
// AppendEntries blocks with no way out, and raft.Shutdown waits for it for ever: a
// holder that led Raft, paused (SIGSTOP) and resumed, did not stop on SIGTERM
// (TestProcsPauseHolder, 1 run in 10 under -race). Queueing the answers keeps every
// send bounded by the transport's I/O timeout; the queue grows only until Raft's loop
// sees its decoder gone and closes the pipeline (one send later).
type noticePipeline struct {
	raft.AppendPipeline
	n      *noticeTransport
	id     raft.ServerID
	target raft.ServerAddress
	out    chan raft.AppendFuture
	acked  chan *ackedFuture // answers from the entries sent ahead (ahead.go)
	done   chan struct{}
	once   sync.Once
}

func (p *noticePipeline) run() {
	in := p.AppendPipeline.Consumer()
	var queue []raft.AppendFuture
	var answered uint64 // the last index a success passed on to Raft covered
	for {
		var out chan raft.AppendFuture
		var next raft.AppendFuture
		if len(queue) > 0 {
			out, next = p.out, queue[0]
		}
		select {
		case f := <-in:
			if f.Error() == nil {
				p.n.note(p.id, p.target, f.Request(), f.Response())
				if r := f.Response(); r.Success {
					answered = max(answered, lastIndex(f.Request()))
				}
			}
			queue = append(queue, f)
		case f := <-p.acked:
			if last := lastIndex(f.req); last > answered {
				answered = last
				queue = append(queue, f)
			}
		case out <- next:
			queue[0] = nil
			queue = queue[1:]
		case <-p.done:
			return
		}
	}
}

func (p *noticePipeline) Consumer() <-chan raft.AppendFuture { return p.out }

func (p *noticePipeline) Close() error {
	err := p.AppendPipeline.Close()
	p.once.Do(func() { close(p.done) })
	p.n.forget(p.target) // replication to target stopped (or starts over)
	return err
}

// noticeWait bounds how long a notice waits for a member to acknowledge the index it
// announces (its entries may still be on the way when the leader commits on another
// member's answer). Raft's own CommitTimeout would tell it by then anyway.
const noticeWait = 50 * time.Millisecond

// notice sends req (a commit notice for index req.PrevLogEntry in term req.Term) to
// each of targets once it has acknowledged that index in that term, each on its own
// goroutine (waiting up to noticeWait for the acknowledgement), and returns at once:
// a member still writing the entries never holds up the notice of one that has them,
// nor the next nudge.
func (n *noticeTransport) notice(req raft.AppendEntriesRequest, targets []raft.Server) {
	for _, s := range targets {
		go n.noticeOne(req, s)
	}
}

func (n *noticeTransport) noticeOne(req raft.AppendEntriesRequest, s raft.Server) {
	var deadline <-chan time.Time
	for {
		n.mu.Lock()
		a := n.acks[s.Address]
		if a.term > req.Term {
			n.mu.Unlock()
			return // a later leader's member: the notice is stale
		}
		if a.term == req.Term && a.index >= req.PrevLogEntry {
			n.mu.Unlock()
			break
		}
		if n.wake == nil {
			n.wake = make(chan struct{})
		}
		w := n.wake
		n.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(noticeWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-w:
		case <-deadline:
			return
		}
	}
	var resp raft.AppendEntriesResponse
	_ = n.Transport.AppendEntries(s.ID, s.Address, &req, &resp) // refused or lost: Raft's own replication tells it later
}

// commitNotice sends a commit notice for the leader's commit index to the other
// members; false when it cannot (this replica does not lead, its commit index is not
// an entry of its term yet, or its transport keeps no acknowledgements): the nudge
// then appends a barrier.
func (l *Log) commitNotice(n *noticeTransport, hdr raft.RPCHeader, logs raft.LogStore) bool {
	if n == nil || l.raft.State() != raft.Leader {
		return false
	}
	term, c := l.raft.CurrentTerm(), l.raft.CommitIndex()
	var e raft.Log
	if c == 0 || logs.GetLog(c, &e) != nil || e.Term != term {
		// An entry of an older term: this leader has not committed one of its own
		// yet (or no longer leads that term).
		return false
	}
	ms, err := l.fsm.Members()
	if err != nil {
		return false
	}
	others := ms[:0]
	for _, m := range ms {
		if m.ID != raft.ServerID(hdr.ID) {
			others = append(others, m)
		}
	}
	req := raft.AppendEntriesRequest{
		RPCHeader:         hdr,
		Term:              term,
		Leader:            hdr.Addr,
		PrevLogEntry:      c,
		PrevLogTerm:       e.Term,
		LeaderCommitIndex: c,
	}
	n.notice(req, others)
	return true
}
