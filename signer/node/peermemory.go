package node

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
)

// Peer memory (issue 38 item 2). A restore that rolls back the mark too (a whole-disk
// or whole-home restore, the common case for personal devices) leaves the device
// nothing of its own to recognise it by. Its peers remember instead: every member
// asks every other voter, once a PeerMemoryEvery, how far it has stored entries it
// knows committed (its knownCommitted) and its Raft term, and keeps the highest of
// each in PeerMemoryFile in its own data dir (a restored device's copy of that file
// is about the others, and only ever ages). A starting device that knows other
// members (its configuration's voters, its address book, the members its mark names:
// othersKnown) starts with its Raft held and refuses votes while it asks them what they
// remember of it (for up to peerMemoryWait: a held follower still takes a live
// leader's entries); a member that remembers it storing a
// committed index past its log, or a term above its own, fences it as restored (the
// remembered term becomes its vote floor). Nobody reachable within the wait, it
// starts as before: a restore is then recognised only by the mark.
//
// A committed index is never truncated by Raft, and terms only grow: an honest
// device is never fenced by what its peers remember.

// PeerMemoryFile in the data dir keeps what this device remembers of the others.
const PeerMemoryFile = "peer-memory.json"

// PeerMemoryEvery is how often a member asks the others how far they stored.
const PeerMemoryEvery = time.Second

const callMemory byte = 6 // payload [callMemory, op]

const (
	memoryReport byte = 0 // answer: this device's own memo
	memoryOfYou  byte = 1 // answer: the memo this device keeps of the caller
)

// memo is what a member reported storing: the highest index it stored and knew
// committed, and its Raft term.
type memo struct {
	Committed uint64 `json:"committed"`
	Term      uint64 `json:"term"`
	// Hash is the answerer's commit hash (hex) at the seq the caller asked about
	// ("" when it has none); not kept.
	Hash string `json:"hash,omitempty"`
	// Clone, set in an answer, tells the caller it is a clone and why (clone.go).
	Clone string `json:"clone,omitempty"`
}

// peerMemory is the memos this device keeps of the others, by server ID.
type peerMemory struct {
	path string
	mu   sync.Mutex
	m    map[string]memo
	// dirty: changed since the last save.
	dirty bool
}

// loadPeerMemory reads dir's PeerMemoryFile. An unreadable file is set aside
// (renamed .corrupt) and memory starts empty: it only ever helps recognise another
// device's restore.
func loadPeerMemory(dir string) (*peerMemory, error) {
	p := &peerMemory{path: filepath.Join(dir, PeerMemoryFile), m: map[string]memo{}}
	b, err := os.ReadFile(p.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", p.path, err)
	}
	if err := json.Unmarshal(b, &p.m); err != nil {
		_ = os.Rename(p.path, p.path+".corrupt")
		p.m = map[string]memo{}
		return p, fmt.Errorf("%s is corrupt (set aside; memory starts empty): %w", p.path, err)
	}
	return p, nil
}

// note merges a member's report (the highest of each field).
func (p *peerMemory) note(id string, r memo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.m[id]
	n := memo{Committed: max(old.Committed, r.Committed), Term: max(old.Term, r.Term)} // Hash and Clone are not kept
	if n != old {
		p.m[id], p.dirty = n, true
	}
}

// keepOnly forgets the memos of devices not in ids (no longer voters: a device
// removed and added again with the same identity starts with a clean slate).
func (p *peerMemory) keepOnly(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.m {
		if !slices.Contains(ids, id) {
			delete(p.m, id)
			p.dirty = true
		}
	}
}

// of returns the memo kept of id.
func (p *peerMemory) of(id string) memo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}

// save writes the memos when they changed.
func (p *peerMemory) save() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dirty {
		return nil
	}
	b, err := json.Marshal(p.m)
	if err != nil {
		return err
	}
	if err := writeSynced(p.path, append(b, '\n')); err != nil {
		return err
	}
	p.dirty = false
	return nil
}

// memoryCallLen is a callMemory payload's length: kind, op, then four uint64s: the seq
// whose hash a report includes (0: none), the caller's incarnation, its start (unix
// ms) and its call counter (clone.go).
const memoryCallLen = 2 + 4*8

// handleMemoryCall decodes a callMemory payload.
func (n *Node) handleMemoryCall(from string, p []byte) ([]byte, error) {
	u := func(i int) uint64 { return binary.BigEndian.Uint64(p[2+8*i:]) }
	inc := incarnation{ID: u(1), Start: int64(u(2))}
	return n.handleMemory(from, p[1], u(0), inc, u(3))
}

// handleMemory answers a member's callMemory.
func (n *Node) handleMemory(from string, op byte, seq uint64, inc incarnation, call uint64) ([]byte, error) {
	var m memo
	if msg := n.clones.seen(from, inc, call, time.Now()); msg != "" {
		n.logger.Warn("a second process runs with a member's identity: it is told to stop", "peer", shortID(from),
			"clone_started", time.UnixMilli(inc.Start).UTC())
		m.Clone = msg
		return json.Marshal(m)
	}
	switch op {
	case memoryReport:
		m = memo{Committed: n.knownCommitted(), Term: n.log.Raft().CurrentTerm()}
		if seq > 0 {
			m.Hash = n.commitHash(seq)
		}
	case memoryOfYou:
		m = n.memory.of(from)
	default:
		return nil, fmt.Errorf("%w: unknown memory call %d", ErrBadRequest, op)
	}
	return json.Marshal(m)
}

// callMemoryOf asks member id (op: memoryReport, with the hash at seq when seq > 0,
// or memoryOfYou).
func (n *Node) callMemoryOf(ctx context.Context, id string, op byte, seq uint64) (memo, error) {
	p := make([]byte, 2, memoryCallLen)
	p[0], p[1] = callMemory, op
	for _, v := range []uint64{seq, n.inc.ID, uint64(n.inc.Start), n.calls.Add(1)} {
		p = binary.BigEndian.AppendUint64(p, v)
	}
	b, err := n.net.Call(ctx, id, p)
	if err != nil {
		return memo{}, err
	}
	var m memo
	if err := json.Unmarshal(b, &m); err != nil {
		return memo{}, fmt.Errorf("%w: a memory answer: %w", ErrInternal, err)
	}
	if m.Clone != "" {
		n.cloneDetected(m.Clone)
		return memo{}, fmt.Errorf("%w: %s", ErrClone, m.Clone)
	}
	return m, nil
}

// otherVoters returns the voters of Raft's latest configuration but this device
// (ok false when the configuration could not be read).
func (n *Node) otherVoters() (_ []string, ok bool) {
	f := n.log.Raft().GetConfiguration()
	if f.Error() != nil || len(f.Configuration().Servers) == 0 {
		return nil, false
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.id {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out, true
}

// keepPeerMemory asks the other voters how far they stored, once a PeerMemoryEvery,
// and saves what changed, until the node stops.
func (n *Node) keepPeerMemory() {
	t := time.NewTicker(PeerMemoryEvery)
	defer t.Stop()
	for {
		// The first round waits a PeerMemoryEvery too: a device that just joined
		// knows the others as voters before they have applied its addition, and
		// they refuse (and log) a call from a device they do not know yet.
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		head := n.log.View().Head
		_, leader := n.log.Raft().LeaderWithID()
		voters, ok := n.otherVoters()
		if ok {
			n.memory.keepOnly(voters)
		}
		for _, id := range voters {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(n.ctx, PeerMemoryEvery)
				defer cancel()
				m, err := n.callMemoryOf(ctx, id, memoryReport, head.Seq)
				if err != nil {
					return
				}
				n.memory.note(id, m)
				n.compareHead(id, id == string(leader), head.Seq, m.Hash)
			})
		}
		wg.Wait()
		if err := n.memory.save(); err != nil && n.ctx.Err() == nil {
			n.logger.Warn("could not save what this device remembers of the others", "err", err)
		}
	}
}

// peerMemoryWait bounds how long a starting device asks the others what they
// remember of it before it starts as before: two election timeouts (at least a
// second) while it votes for no one; a device whose configuration names it alone
// (and which knows other members) would elect itself at once, so it waits
// loneMemoryWait. A longer wait for everyone cost the simulator's liveness bound
// after a heal (3 s: profile timetravel seed 100023 failed it in 7 of 8 runs, 0 of 8
// at 1 s), since a pending device refuses the votes a quorum may need.
func (n *Node) peerMemoryWait(lone bool) time.Duration {
	if lone {
		return loneMemoryWait
	}
	_, el := n.log.RaftTimeouts()
	return max(2*el, 4*n.cfg.Tick, time.Second)
}

// loneMemoryWait is peerMemoryWait for a device whose configuration names it alone.
const loneMemoryWait = 10 * time.Second

// askPeersAboutMe runs once at start when the fence is pending (decide): it asks
// every other voter of the configuration Raft started from what it remembers of this
// device, fences it when one remembers more than it has, and otherwise lets Raft
// campaign.
func (n *Node) askPeersAboutMe(st intentlog.StartState) {
	f := n.fence
	defer func() {
		f.pending.Store(false)
		if !f.armed.Load() {
			if err := n.log.Unhold(); err != nil {
				n.logger.Error("could not let Raft campaign", "err", err)
			}
		}
	}()
	others := f.ask
	ctx, cancel := context.WithTimeout(n.ctx, n.peerMemoryWait(st.OnlyVoter(raft.ServerID(n.id))))
	defer cancel()
	type answer struct {
		id string
		m  memo
		ok bool
	}
	ch := make(chan answer, len(others))
	for _, id := range others {
		go func() {
			m, err := n.callMemoryOf(ctx, id, memoryOfYou, 0)
			ch <- answer{id, m, err == nil}
		}()
	}
	answered := 0
	for range others {
		a := <-ch
		if !a.ok {
			continue
		}
		answered++
		var why string
		switch {
		case a.m.Committed > st.LastIndex:
			why = fmt.Sprintf("member %s remembers this device storing entries up to %d known committed, but its Raft log ends at %d: restored whole from an older copy (the mark too)?",
				shortID(a.id), a.m.Committed, st.LastIndex)
		case a.m.Term > st.Term:
			why = fmt.Sprintf("member %s remembers this device in Raft term %d, but its term is %d: restored whole from an older copy (the mark too)?",
				shortID(a.id), a.m.Term, st.Term)
		}
		if why != "" {
			f.restoredPerPeers(why, a.m.Term)
			return
		}
	}
	n.logger.Debug("the members remember nothing this device lacks", "asked", len(others), "answered", answered)
}

// compareHead raises the divergence alarm when the Raft leader's commit at this
// device's head seq differs from this device's: the chain key signed two commits for
// that seq (a restored copy or a clone helped a stale majority; issue 38 item 3).
// Only the leader's chain is the cluster's: a member that differs from another
// follower says nothing. Applied commits are final, so any difference is a fork.
func (n *Node) compareHead(id string, isLeader bool, seq uint64, theirs string) {
	if !isLeader || seq == 0 || theirs == "" {
		return
	}
	mine := n.commitHash(seq)
	if mine == "" || mine == theirs {
		return
	}
	n.diverge(&DivergedError{Msg: fmt.Sprintf("the chain key signed two different commits for seq %d: this replica applied %.16s…, the Raft leader %s applied %.16s…; "+
		"a device restored from an older copy, or a clone, likely helped elect a leader without this replica's commits. "+
		"Export this device's chain first (baton export: it holds commits the others lack)", seq, mine, shortID(id), theirs)})
}
