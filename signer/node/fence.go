package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/transport"
)

// The catch-up fence (issue 20 item 2). Raft's safety assumes that what a voter once
// stored and promised never goes away: the entries it acknowledged (counted toward a
// commit), the terms it reached and the votes it cast. A device whose Raft log was
// dropped (`baton repair`, raft.db lost) or put back to an older copy (a restored
// backup) breaks that: it could vote for a candidate whose log lacks a committed
// entry, and that candidate could commit something else at the same index: a fork.
//
// Two guards, both in a wrapper around the Raft transport (so they hold for libp2p
// and for the simulator alike), both decided before the wrapper hands Raft its first
// message:
//
//   - the fence: a device that lost its log refuses every vote and pre-vote, and
//     does not campaign (its vote for itself counts like any other), until it has
//     caught up: it asks the leader for a barrier (an index at or past every entry
//     committed so far: the leader was elected without this device's vote) and
//     waits until it has applied that index. Its acknowledgements of entries it
//     really stores still count (they are true); only its votes are withheld. With
//     the fence up a device can not help elect anyone, so a cluster that has lost
//     its only other copy of a committed entry waits for that copy to return
//     instead of forking.
//   - the mark: a small file outside the data dir (MarkFile, default <DataDir>.mark)
//     keeps the highest Raft term this device has stored (written just before Raft
//     stores a higher one as its current term: intentlog.Config.OnTerm) and the highest
//     index it stored and knew committed (written once per tick; knownCommitted). A data dir found
//     behind its mark (a restored older copy, a lost raft.db) raises the fence; the
//     mark's term becomes a floor: no vote in a term at or below it (the copy may have
//     forgotten a vote there) and no entries from a leader of an older term (the copy
//     may have forgotten that it moved on).
//
// Limits: the mark lives beside the data dir, not in it; a restore that also rolls
// the mark back (a whole-disk image) or a copy moved to another machine without it is
// not recognised as a restore. Its applied index lags by up to a tick, so a copy
// taken within the last tick before a crash looks current; a repaired device or one
// whose raft.db is missing is recognised whatever the mark says.

// MarkSuffix names the default Config.MarkFile: the data dir's path plus this.
const MarkSuffix = ".mark"

// RejoinFile in the data dir records that this device lost its Raft log (written by
// `baton repair` through MarkRejoin); it is removed once the device has caught up.
const RejoinFile = "rejoin.json"

// RejoinState is State.Rejoin: why this device does not vote yet and how far it is.
type RejoinState struct {
	Reason  string `json:"reason"`
	Target  uint64 `json:"target_index"` // the leader's barrier index (0: not known yet)
	Applied uint64 `json:"applied_index"`
}

// markDoc is the content of the mark file.
type markDoc struct {
	ID   string `json:"id"`
	Term uint64 `json:"term"`
	// Applied is the highest index this device stored and knew committed (the name
	// is the file format's: before issue 38 it was the applied index).
	Applied uint64 `json:"applied"`
	// Members are the other members' p2p multiaddrs (the address book), so that a
	// restored copy from before some of them joined still admits them: they hold the
	// history it must catch up with.
	Members []string `json:"members,omitempty"`
}

// fence is the state behind the transport wrapper.
type fence struct {
	logger *slog.Logger
	path   string // the mark file ("" disables the mark)
	id     string

	off         bool                 // the NoFence knob: never armed
	filtersOnly bool                 // the FenceFiltersOnly knob: armed filters messages, holds nothing
	noMemory    bool                 // the NoPeerMemory knob: the members are not asked at start
	start       intentlog.StartState // what Raft started from (decide)
	known       []string             // members known outside Raft (address book; Parts.known), set before decide
	ask         []string             // whom a pending start asks (decide)
	lost        bool                 // the device lost Raft state it had (decide)
	rebootstrap bool                 // the Rebootstrap knob
	floor       atomic.Uint64        // refuse votes in terms <= floor, entries of terms < floor
	pending     atomic.Bool          // asking the members what they remember of this device (peermemory.go)
	armed       atomic.Bool          // refuse all votes until caught up
	target      atomic.Uint64

	// members returns the address book as sorted p2p multiaddrs (nil: not kept,
	// a node built by New). Set before the node runs.
	members func() []string

	mu     sync.Mutex
	reason string
	mark   markDoc
	werr   error // the last error writing the mark
}

func (c Config) markFile() string {
	switch c.MarkFile {
	case "-":
		return ""
	case "":
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			return ""
		}
		return filepath.Clean(abs) + MarkSuffix
	}
	return c.MarkFile
}

// MarkRejoin records in dir that the device lost its Raft log (repair), so that its
// next start keeps it from voting until it has caught up.
func MarkRejoin(dir, reason string) error {
	b, _ := json.Marshal(struct {
		Reason string    `json:"reason"`
		At     time.Time `json:"at"`
	}{reason, time.Now().UTC()})
	return writeSynced(filepath.Join(dir, RejoinFile), append(b, '\n'))
}

// newFence reads the mark for the device id. A corrupt mark is an error: it is the
// only record of the terms this device promised.
func newFence(cfg Config, id string, logger *slog.Logger) (*fence, error) {
	f := &fence{logger: logger, path: cfg.markFile(), id: id}
	if k := cfg.Knobs; k != nil {
		f.off, f.rebootstrap, f.filtersOnly, f.noMemory = k.NoFence, k.Rebootstrap, k.FenceFiltersOnly, k.NoPeerMemory
	}
	if f.path == "" {
		return f, nil
	}
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.mark.ID = id
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", f.path, err)
	}
	var m markDoc
	if err := json.Unmarshal(b, &m); err != nil || m.ID == "" {
		return nil, fmt.Errorf("%s is corrupt (it keeps the highest Raft term this device reached, outside its data dir): "+
			"remove it only if this device's data dir was never restored from an older copy", f.path)
	}
	if m.ID != id {
		logger.Warn("the mark beside the data dir belongs to another device; starting a new one", "mark", f.path, "its_device", m.ID)
		m = markDoc{ID: id}
	}
	f.mark = m
	f.floor.Store(m.Term)
	return f, nil
}

// decide raises the fence when the log this device starts from is behind what it had
// (intentlog.Config.Hold: called before Raft runs, and so before the wrapper delivers
// its first message). It reports whether Raft must start held: a fenced device never
// campaigns, whatever its configuration says (one that names this device alone would
// elect it with no message for the wrapper to refuse).
func (f *fence) decide(dir string, st intentlog.StartState) (hold bool) {
	lastIndex, term := st.LastIndex, st.Term
	var why string
	if _, err := os.Stat(filepath.Join(dir, RejoinFile)); err == nil {
		why = "its Raft log was repaired (baton repair)"
	}
	switch {
	case why != "":
	case lastIndex == 0 && term > 0:
		why = "its Raft log is empty but its Raft state is not (a repair, or a lost log)"
	case lastIndex == 0 && f.mark.Term > 0:
		why = fmt.Sprintf("its raft.db is gone, but %s says it reached term %d", f.path, f.mark.Term)
	case lastIndex < f.mark.Applied:
		why = fmt.Sprintf("its Raft log ends at index %d, but it had stored entries up to %d known committed (%s): a restored older copy?", lastIndex, f.mark.Applied, f.path)
	case term < f.mark.Term:
		why = fmt.Sprintf("its Raft term is %d, but it had reached term %d (%s): a restored older copy?", term, f.mark.Term, f.path)
	}
	f.start = st
	if why == "" {
		// Knowing other voters, it asks them what they remember of it before it
		// votes or campaigns (peermemory.go).
		if f.ask = f.othersKnown(st); !f.off && !f.filtersOnly && !f.noMemory && len(f.ask) > 0 {
			f.pending.Store(true)
			return true
		}
		return false
	}
	f.lost = true
	if f.off {
		return false
	}
	f.mu.Lock()
	f.reason = why
	f.mu.Unlock()
	f.armed.Store(true)
	f.logger.Warn("this device lost Raft state it had: it neither votes, campaigns, claims nor signs until it has caught up with the cluster",
		"why", why, "term_floor", f.floor.Load(), "raft_voters", len(st.Voters))
	return !f.filtersOnly
}

// guards reports whether the fence is up, or the start still asks the members what
// they remember of it (pending), and so guards the acts (campaign, claim, signature)
// as well as the messages; its reason when it does.
func (f *fence) guards() (bool, string) {
	if f == nil || f.filtersOnly {
		return false, ""
	}
	if !f.armed.Load() {
		if f.pending.Load() {
			return true, "asking the other members what they remember of this device before it takes part"
		}
		return false, ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return true, f.reason
}

// state is State.Rejoin (nil when the fence is down).
func (f *fence) state(applied uint64) *RejoinState {
	if f == nil || !f.armed.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &RejoinState{Reason: f.reason, Target: f.target.Load(), Applied: applied}
}

// sawTerm records term in the mark before Raft stores it as its current term
// (intentlog.Config.OnTerm; no-op unless it is higher). Not when a message carries it:
// a Raft that never takes the message (stopped after its removal from the
// configuration) never stores the term, and a mark ahead of the stored term fences
// the next start as a restored older copy (the simulator's seed 300229: a removed
// device re-added and restarted refused every vote, and with another member down no
// leader could be elected).
func (f *fence) sawTerm(term uint64) {
	if f.path == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if term <= f.mark.Term {
		return
	}
	m := f.mark
	m.Term = term
	f.writeLocked(m)
}

// applied records an applied index, and the address book when it changed, in the
// mark (once a tick at most).
func (f *fence) applied(idx uint64) {
	if f.path == "" {
		return
	}
	var ms []string
	if f.members != nil {
		ms = f.members()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if idx <= f.mark.Applied && (f.members == nil || slices.Equal(ms, f.mark.Members)) {
		return
	}
	m := f.mark
	m.Applied = max(idx, m.Applied)
	if f.members != nil {
		m.Members = ms
	}
	f.writeLocked(m)
}

// markMembers returns the members the mark names (for a fenced start: see
// Node.admitMarkMembers).
func (f *fence) markMembers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mark.Members)
}

func (f *fence) writeLocked(m markDoc) {
	b, _ := json.Marshal(m)
	if err := writeSynced(f.path, append(b, '\n')); err != nil {
		if f.werr == nil {
			f.logger.Error("could not write the mark beside the data dir: put the data dir inside a directory this user owns, or give --mark-file a path in one (the mark must stay outside the data dir)", "path", f.path, "err", err)
		}
		f.werr = err
		return
	}
	f.werr = nil
	f.mark = m
}

// writeSynced writes p atomically (temp file, fsync, rename, fsync of the dir).
func writeSynced(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// refuseVote reports whether a (pre-)vote request for term must be refused.
func (f *fence) refuseVote(term uint64) bool {
	return f.armed.Load() || f.pending.Load() || term <= f.floor.Load()
}

// filter answers an RPC itself when a guard refuses it (true), else lets Raft have it.
func (f *fence) filter(rpc raft.RPC) bool {
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if f.refuseVote(req.Term) {
			rpc.Respond(&raft.RequestVoteResponse{RPCHeader: header(), Term: max(req.Term, f.floor.Load()), Granted: false}, nil)
			return true
		}
	case *raft.RequestPreVoteRequest:
		if f.refuseVote(req.Term) {
			// Armed: a term below the request, so that the candidate's term does not
			// move. At or below the floor: a term above it. A pre-vote does not
			// raise the candidate's term, and hashicorp/raft's candidate adopts
			// only a term above the one it asked for; answered with the floor
			// itself, a candidate asking for that term asked for it for ever.
			term := req.Term - 1
			if floor := f.floor.Load(); req.Term <= floor {
				term = floor + 1
			}
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: header(), Term: term, Granted: false}, nil)
			return true
		}
	case *raft.TimeoutNowRequest:
		// A leadership transfer's order to campaign at once: the one way into
		// candidacy besides the follower's timeout, which the hold keeps from firing.
		if (f.armed.Load() || f.pending.Load()) && !f.filtersOnly {
			rpc.Respond(nil, errFenced)
			return true
		}
	case *raft.AppendEntriesRequest:
		if floor := f.floor.Load(); req.Term < floor {
			rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: header(), Term: floor, Success: false}, nil)
			return true
		}
	}
	return false
}

func header() raft.RPCHeader { return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax} }

// fencedTransport is the Raft transport with the fence in front of Raft.
type fencedTransport struct {
	raft.Transport
	f     *fence
	out   chan raft.RPC
	once  sync.Once
	start chan struct{}
	stop  chan struct{}
}

var (
	_ raft.WithPreVote = (*fencedTransport)(nil)
	_ raft.WithClose   = (*fencedTransport)(nil)
)

func newFencedTransport(inner raft.Transport, f *fence) *fencedTransport {
	return &fencedTransport{Transport: inner, f: f, out: make(chan raft.RPC),
		start: make(chan struct{}), stop: make(chan struct{})}
}

// run delivers RPCs to Raft (after release) until ctx ends.
func (t *fencedTransport) run(ctx context.Context) {
	in := t.Transport.Consumer()
	select {
	case <-t.start:
	case <-ctx.Done():
		return
	case <-t.stop:
		return
	}
	for {
		select {
		case rpc := <-in:
			if t.f.filter(rpc) {
				continue
			}
			select {
			case t.out <- rpc:
			case <-ctx.Done():
				return
			case <-t.stop:
				return
			}
		case <-ctx.Done():
			return
		case <-t.stop:
			return
		}
	}
}

// release lets messages through (once the fence is decided).
func (t *fencedTransport) release() { t.once.Do(func() { close(t.start) }) }

func (t *fencedTransport) Consumer() <-chan raft.RPC { return t.out }

func (t *fencedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		t.Transport.SetHeartbeatHandler(nil)
		return
	}
	t.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if t.f.filter(rpc) {
			return
		}
		cb(rpc)
	})
}

// errFenced: this device does not campaign while the fence is up. Its own vote counts
// for its candidacy like any other: a candidate that lost an entry it had
// acknowledged could win with a voter that never had it.
var errFenced = errors.New("this device lost Raft state and does not campaign until it has caught up")

func (t *fencedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.f.armed.Load() {
		return errFenced
	}
	return t.Transport.RequestVote(id, target, args, resp)
}

func (t *fencedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.f.armed.Load() {
		return errFenced
	}
	pv, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("the transport does not support pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

func (t *fencedTransport) Close() error {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// keepFence runs until the node stops: it records the applied index in the mark each
// tick and, while the fence is up, asks the leader for a barrier and lowers the fence
// once this device has applied that index.
func (n *Node) keepFence() {
	f := n.fence
	for {
		applied := n.log.Raft().AppliedIndex()
		if f.armed.Load() {
			if tg := f.target.Load(); tg == 0 {
				ctx, cancel := context.WithTimeout(n.ctx, 2*n.cfg.Tick)
				b, err := n.net.Barrier(ctx)
				cancel()
				if err == nil && b > 0 {
					f.target.Store(b)
					n.logger.Info("catching up before voting again", "target_index", b, "applied", applied)
				}
			} else if applied >= tg {
				if err := os.Remove(filepath.Join(n.cfg.DataDir, RejoinFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					n.logger.Error("could not remove the rejoin marker", "err", err)
				}
				f.applied(applied)
				f.armed.Store(false)
				if err := n.log.Unhold(); err != nil {
					n.logger.Error("could not let Raft campaign again", "err", err)
				}
				n.logger.Info("caught up with the cluster: this device votes, campaigns and signs again", "applied", applied)
			}
		} else {
			f.applied(n.knownCommitted())
		}
		var watch <-chan struct{} // only the catch-up waits on applies; the mark is written once a tick at most
		if f.armed.Load() && f.target.Load() != 0 {
			watch = n.log.Watch()
		}
		t := time.NewTimer(n.cfg.Tick)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-watch:
			t.Stop()
		}
	}
}

// rejoinOrFresh reports whether this device starts fresh (an empty log: it bootstraps
// or joins as configured). A device that lost its log (the fence is up) is not fresh
// while it knows other members (others): it waits for their leader to re-sync it,
// the founder too (it must not bootstrap again). Knowing none, nobody else holds the
// history: it starts as before, where a chain key with a history refuses to
// bootstrap (checkIdentity) and says how to join.
func (n *Node) rejoinOrFresh(others int) bool {
	if n.log.Raft().LastIndex() != 0 {
		return false
	}
	if !n.fence.lost || n.fence.rebootstrap {
		return true
	}
	if others > 0 {
		n.logger.Warn("this device lost its Raft log: it waits for a member that holds the history to re-sync it", "known_members", others)
		return false
	}
	n.fence.armed.Store(false)
	if err := n.log.Unhold(); err != nil {
		n.logger.Error("could not let Raft campaign again", "err", err)
	}
	n.logger.Warn("this device lost its Raft log and knows no other member: no one can re-sync it")
	return true
}

// admitMarkMembers admits, on a fenced start, the members the mark names that the
// address book lacks: a data dir restored from before they joined knows none of
// them, and its gater would refuse the very devices that hold the history it must
// catch up with.
func (n *Node) admitMarkMembers() {
	if !n.fence.armed.Load() || n.host == nil {
		return
	}
	known := map[peer.ID]bool{}
	for _, m := range n.host.Members() {
		known[m.ID] = true
	}
	infos, err := transport.ParseSeeds(n.fence.markMembers())
	if err != nil {
		n.logger.Warn("the mark's members are unreadable; the restored copy admits only the members it knows", "err", err)
		return
	}
	for _, ai := range infos {
		if known[ai.ID] || ai.ID.String() == n.id {
			continue
		}
		if err := n.host.AddMember(ai); err != nil {
			n.logger.Warn("could not admit a member the mark names", "peer", ai.ID, "err", err)
			continue
		}
		n.logger.Info("admitted a member the mark names (the restored copy did not know it)", "peer", ai.ID)
	}
}

// p2pAddrs returns the members' p2p multiaddrs, sorted.
func p2pAddrs(ms []peer.AddrInfo) []string {
	var out []string
	for _, m := range ms {
		as, err := peer.AddrInfoToP2pAddrs(&m)
		if err != nil {
			continue
		}
		for _, a := range as {
			out = append(out, a.String())
		}
	}
	slices.Sort(out)
	return out
}

// knownCommitted is what the mark records as Applied: the highest index this device
// stored and knows committed (Raft's commit index, which a follower caps at its own
// last index), at least its applied index. Raft's safety rests on the entries a
// device acknowledged, and the applied index can lag them for longer than a tick
// (an apply halted on a fault, a slow state store).
func (n *Node) knownCommitted() uint64 {
	r := n.log.Raft()
	return max(r.AppliedIndex(), r.CommitIndex())
}

// restoredPerPeers raises the fence on what a member remembers of this device
// (peermemory.go): term becomes a vote floor.
func (f *fence) restoredPerPeers(why string, term uint64) {
	if f.off || f.filtersOnly {
		return
	}
	for {
		fl := f.floor.Load()
		if term <= fl || f.floor.CompareAndSwap(fl, term) {
			break
		}
	}
	f.mu.Lock()
	f.reason = why
	f.mu.Unlock()
	f.armed.Store(true)
	f.logger.Warn("this device lost Raft state it had: it neither votes, campaigns, claims nor signs until it has caught up with the cluster",
		"why", why, "term_floor", f.floor.Load())
}

// othersKnown returns the other members this device knows, sorted: the voters of the
// configuration Raft starts from, its address book (known), and the members the mark
// names. A start whose configuration names it alone while it knows others (a copy from
// before they joined, restored without its mark) asks them too.
func (f *fence) othersKnown(st intentlog.StartState) []string {
	set := map[string]bool{}
	for _, v := range st.Voters {
		set[string(v)] = true
	}
	for _, id := range f.known {
		set[id] = true
	}
	if infos, err := transport.ParseSeeds(f.mark.Members); err == nil {
		for _, ai := range infos {
			set[ai.ID.String()] = true
		}
	}
	delete(set, f.id)
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
