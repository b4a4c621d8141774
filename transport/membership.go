package transport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// joinRequest is the JSON payload of kindMembers and kindJoin.
type joinRequest struct {
	Token    []byte   `json:"token,omitempty"`
	ID       string   `json:"id"`
	Addrs    []string `json:"addrs,omitempty"`
	Nonvoter bool     `json:"nonvoter,omitempty"`
}

// joinResponse lists the members (including the answering node) and their addresses.
type joinResponse struct {
	Leader  string              `json:"leader,omitempty"`
	Members map[string][]string `json:"members"`
}

// Join asks a member of an existing cluster to add this device, as a voter or, with
// nonvoter, as a non-voter. seeds are members (their addresses, e.g. from P2PAddrs
// of the inviting member); token is the secret of the join window that one of them
// opened with Host.AllowJoin. The contacted member forwards the join to the leader if
// it is not the leader. On success the members' addresses are in this device's
// address book and gater; the leader then replicates the log to this device's Raft
// (which must have been started without bootstrapping). Retries over the seeds until
// ctx's deadline (ProposeTimeout when none).
//
// Errors: ErrBadToken (no window open, wrong token, or the invite already used by
// another device), ErrNotMember, *RemoteError (the leader's AddVoter failed),
// ErrNoLeader/ErrTimeout, connection errors (ErrHandshake when the network key
// differs: at once when the handshake fails, or at the deadline, with ErrTimeout,
// when it only ever timed out, which a loaded member can also cause).
func (c *Cluster) Join(ctx context.Context, seeds []peer.AddrInfo, token []byte, nonvoter bool) error {
	if len(seeds) == 0 {
		return errors.New("join: no members given")
	}
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	for _, s := range seeds {
		c.h.AllowPeer(s)
	}
	req := joinRequest{Token: token, ID: c.h.ID().String(), Addrs: addrStrings(c.h.Addrs()), Nonvoter: nonvoter}
	payload, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	wait := c.cfg.RetryMin
	var lastErr error
	for i := 0; ; i++ {
		seed := seeds[i%len(seeds)]
		err := c.joinVia(ctx, seed, payload)
		if err == nil {
			c.kickSync()
			return nil
		}
		var re *RemoteError
		// A handshake that failed outright means another network key; one that
		// timed out may also be a slow (loaded) member: retry it, and report the
		// handshake if the deadline comes first.
		badKey := errors.Is(err, ErrHandshake) && !errors.Is(err, context.DeadlineExceeded)
		if errors.Is(err, ErrBadToken) || errors.Is(err, ErrNotMember) || errors.As(err, &re) ||
			badKey || errors.Is(err, ErrRefused) {
			return fmt.Errorf("join via %s: %w", seed.ID, err)
		}
		lastErr = err
		if !c.backoff(ctx, &wait) {
			if c.ctx.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("join: %w: %w (last: %w)", ErrTimeout, ctx.Err(), lastErr)
		}
	}
}

// joinVia runs the two join steps against one seed: learn (and admit) the members so
// the leader can reach us, then ask to be added.
func (c *Cluster) joinVia(ctx context.Context, seed peer.AddrInfo, payload []byte) error {
	if err := c.h.Connect(ctx, seed); err != nil {
		return err
	}
	resp, err := c.joinCall(ctx, seed.ID, kindMembers, payload)
	if err != nil {
		return err
	}
	for _, m := range resp {
		c.h.AllowPeer(m)
	}
	resp, err = c.joinCall(ctx, seed.ID, kindJoin, payload)
	if err != nil {
		return err
	}
	for _, m := range resp {
		if err := c.h.AddMember(m); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) joinCall(ctx context.Context, p peer.ID, kind byte, payload []byte) ([]peer.AddrInfo, error) {
	code, body, err := c.call(ctx, p, JoinProtocol, kind, payload)
	if err != nil {
		return nil, err
	}
	switch code {
	case codeOK:
		return decodeMembers(body)
	case codeBadToken:
		if len(body) > 0 { // why, from a device that says it
			return nil, fmt.Errorf("%w: %s", ErrBadToken, body)
		}
		return nil, ErrBadToken
	case codeNotMember:
		return nil, ErrNotMember
	case codeNotLeader:
		return nil, ErrNotLeader
	case codeAppError:
		return nil, &RemoteError{Peer: p.String(), Msg: string(body)}
	default:
		return nil, fmt.Errorf("bad request: %s", body)
	}
}

// handleJoinStream serves JoinProtocol to anyone the gater admitted. Every request
// must carry the open window's token and name the requesting peer itself.
func (c *Cluster) handleJoinStream(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	w := bufio.NewWriter(s)
	_ = s.SetDeadline(time.Now().Add(c.cfg.ProposeTimeout))
	kind, timeoutMS, payload, err := readRequest(bufio.NewReader(s), 64<<10)
	if err != nil {
		_ = s.Reset()
		return
	}
	var req joinRequest
	if err := json.Unmarshal(payload, &req); err != nil || req.ID != remote.String() {
		_ = writeResponse(w, codeBadRequest, []byte("malformed join request"))
		return
	}
	refuse := func() {
		why := c.h.gater.refusal(req.Token, remote)
		c.log.Warn("refused join", "peer", remote, "why", why)
		_ = writeResponse(w, codeBadToken, []byte(why))
	}
	switch kind {
	case kindMembers:
		if !c.h.gater.checkToken(req.Token, remote) {
			refuse()
			return
		}
		_ = writeResponse(w, codeOK, c.membersSnapshot())
	case kindJoin:
		// Hold one of the window's uses for the whole join, so that two devices with
		// the same invite cannot both get in; a success spends it.
		gen, ok := c.h.gater.claimJoin(req.Token, remote)
		if !ok {
			refuse()
			return
		}
		timeout := c.cfg.ProposeTimeout
		if timeoutMS > 0 {
			timeout = min(timeout, time.Duration(timeoutMS)*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(c.ctx, timeout)
		defer cancel()
		req.Token = nil // members trust each other; the token stays here
		fwd, _ := json.Marshal(req)
		res, err := c.toLeader(ctx, kindJoin, fwd, c.leaderJoin)
		c.h.gater.endJoin(gen, remote, err == nil)
		if err != nil {
			_ = writeResponse(w, codeAppError, []byte(err.Error()))
			return
		}
		c.log.Info("join accepted; invite used", "peer", remote)
		_ = writeResponse(w, codeOK, res)
	default:
		_ = writeResponse(w, codeBadRequest, []byte("unknown join request kind"))
	}
}

// leaderJoin adds the device described by payload (a joinRequest) to the Raft
// configuration. Leader only; returns the member list.
func (c *Cluster) leaderJoin(ctx context.Context, payload []byte) ([]byte, error) {
	if c.r.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	var req joinRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("%w: join: %w", errBadRequest, err)
	}
	p, err := peer.Decode(req.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: join: %w", errBadRequest, err)
	}
	addrs, err := parseAddrs(req.Addrs)
	if err != nil {
		return nil, fmt.Errorf("%w: join: %w", errBadRequest, err)
	}
	c.setPending(p, +1)
	defer c.setPending(p, -1)
	// Admit and record the joiner before AddVoter: replication to it starts at once.
	if err := c.h.AddMember(peer.AddrInfo{ID: p, Addrs: addrs}); err != nil {
		return nil, err
	}
	timeout := time.Until(deadlineOr(ctx, c.cfg.ProposeTimeout))
	id := raft.ServerID(p.String())
	var f raft.IndexFuture
	if req.Nonvoter {
		f = c.r.AddNonvoter(id, raft.ServerAddress(id), 0, timeout)
	} else {
		f = c.r.AddVoter(id, raft.ServerAddress(id), 0, timeout)
	}
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("add %s: %w", p, err)
	}
	c.log.Info("member added", "peer", p, "nonvoter", req.Nonvoter)
	c.kickSync()
	return c.membersSnapshot(), nil
}

// Add adds p to the cluster through the leader, as a voter or a non-voter, without a
// join token: an operator's call on a member (e.g. POST /v1/members). p's own gater
// must admit the members (it does while it runs Join, or after AllowPeer).
// Errors as for Propose; *RemoteError when the leader's AddVoter fails.
func (c *Cluster) Add(ctx context.Context, p peer.AddrInfo, nonvoter bool) error {
	payload, err := json.Marshal(joinRequest{ID: p.ID.String(), Addrs: addrStrings(p.Addrs), Nonvoter: nonvoter})
	if err != nil {
		return fmt.Errorf("add %s: %w", p.ID, err)
	}
	if _, err := c.toLeader(ctx, kindJoin, payload, c.leaderJoin); err != nil {
		return fmt.Errorf("add %s: %w", p.ID, err)
	}
	c.kickSync()
	return nil
}

// Leave removes this device from the cluster through the leader. A leader first hands
// leadership to another voter (falling back to removing itself, which raft supports).
// On success the address book is emptied and no longer synced from this device's
// Raft configuration (which may never see the removal): the device no longer admits
// the members. Shut it down afterwards; to join again, start from fresh Raft state.
// Errors: ErrLastVoter when this device is the only voter; otherwise as for Propose.
func (c *Cluster) Leave(ctx context.Context) error {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	self := c.h.ID()
	if c.isVoter(self) && c.otherVoters() == 0 {
		return fmt.Errorf("leave: %w", ErrLastVoter)
	}
	if c.r.State() == raft.Leader && c.otherVoters() > 0 {
		if err := c.r.LeadershipTransfer().Error(); err == nil {
			wait := c.cfg.RetryMin
			for {
				if l := c.Leader(); l != "" && l != self {
					break
				}
				if !c.backoff(ctx, &wait) {
					break // fall through: the remove below reports the deadline
				}
			}
		} else {
			c.log.Warn("leadership transfer before leave failed; removing self as leader", "err", err)
		}
	}
	if _, err := c.toLeader(ctx, kindRemove, []byte(self.String()), c.leaderRemove); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	// The leader stops replicating to a removed server at once, so this device's own
	// configuration may never show the removal: stop syncing from it.
	c.left.Store(true)
	for _, m := range c.h.Members() {
		c.forget(m.ID)
	}
	c.log.Info("left the cluster")
	return nil
}

// Remove removes member p from the cluster through the leader (Leave when p is this
// device). Errors as for Propose.
func (c *Cluster) Remove(ctx context.Context, p peer.ID) error {
	if p == c.h.ID() {
		return c.Leave(ctx)
	}
	if _, err := c.toLeader(ctx, kindRemove, []byte(p.String()), c.leaderRemove); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// leaderRemove removes the peer named by payload from the Raft configuration.
func (c *Cluster) leaderRemove(ctx context.Context, payload []byte) ([]byte, error) {
	if c.r.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	p, err := peer.Decode(string(payload))
	if err != nil {
		return nil, fmt.Errorf("%w: remove: %w", errBadRequest, err)
	}
	timeout := time.Until(deadlineOr(ctx, c.cfg.ProposeTimeout))
	rf := c.r.RemoveServer(raft.ServerID(p.String()), 0, timeout)
	if err := rf.Error(); err != nil {
		return nil, fmt.Errorf("remove %s: %w", p, err)
	}
	c.log.Info("member removed", "peer", p)
	if p != c.h.ID() {
		c.noteRemovedMember(p, rf.Index())
		c.forget(p)
	}
	return nil, nil
}

// answerAddrs returns the addresses this node knows for the peer named by payload.
func (c *Cluster) answerAddrs(payload []byte) ([]byte, error) {
	p, err := peer.Decode(string(payload))
	if err != nil {
		return nil, fmt.Errorf("%w: addrs: %w", errBadRequest, err)
	}
	var as []ma.Multiaddr
	if p == c.h.ID() {
		as = c.h.Addrs()
	} else if m, ok := c.h.book.all()[p]; ok && len(m) > 0 {
		as = m
	} else {
		as = c.h.h.Peerstore().Addrs(p)
	}
	return json.Marshal(addrStrings(as))
}

// membersSnapshot encodes this node's view of the members, itself included.
func (c *Cluster) membersSnapshot() []byte {
	resp := joinResponse{Members: map[string][]string{c.h.ID().String(): addrStrings(c.h.Addrs())}}
	if l := c.Leader(); l != "" {
		resp.Leader = l.String()
	}
	for p, as := range c.h.book.all() {
		resp.Members[p.String()] = addrStrings(as)
	}
	b, _ := json.Marshal(resp)
	return b
}

func decodeMembers(b []byte) ([]peer.AddrInfo, error) {
	var resp joinResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("decode member list: %w", err)
	}
	var out []peer.AddrInfo
	for id, ss := range resp.Members {
		p, err := peer.Decode(id)
		if err != nil {
			return nil, fmt.Errorf("decode member list: %w", err)
		}
		as, err := parseAddrs(ss)
		if err != nil {
			return nil, fmt.Errorf("decode member list: %w", err)
		}
		out = append(out, peer.AddrInfo{ID: p, Addrs: as})
	}
	return out, nil
}

// Member is one server of the Raft configuration as this device sees it.
type Member struct {
	ID       peer.ID
	Suffrage raft.ServerSuffrage // raft.Voter or raft.Nonvoter
	Addrs    []ma.Multiaddr      // from the address book (this device's own listen addresses for itself)
	Leader   bool                // the current leader as known locally
}

// Members returns the Raft configuration (as last applied locally) with the known
// addresses and the leader marked. It does not wait for a quorum.
func (c *Cluster) Members() ([]Member, error) {
	f := c.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	book := c.h.book.all()
	leader := c.Leader()
	var out []Member
	for _, s := range f.Configuration().Servers {
		p, err := peer.Decode(string(s.ID))
		if err != nil {
			return nil, fmt.Errorf("members: server ID %q: %w", s.ID, err)
		}
		m := Member{ID: p, Suffrage: s.Suffrage, Addrs: book[p], Leader: p == leader}
		if p == c.h.ID() {
			m.Addrs = c.h.Addrs()
		}
		out = append(out, m)
	}
	return out, nil
}

func (c *Cluster) isVoter(p peer.ID) bool {
	f := c.r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == p.String() {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

func (c *Cluster) otherVoters() int {
	f := c.r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != c.h.ID().String() {
			n++
		}
	}
	return n
}

func (c *Cluster) setPending(p peer.ID, d int) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	c.pending[p] += d
	if c.pending[p] <= 0 {
		delete(c.pending, p)
	}
}

func (c *Cluster) isPending(p peer.ID) bool {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	return c.pending[p] > 0
}

// forget removes p from the gater and the address book at once; its connections are
// closed one to two SyncIntervals later, after any reply to it (a leave) has gone out.
func (c *Cluster) forget(p peer.ID) {
	if err := c.h.forgetMember(p); err != nil {
		c.log.Error("forget member", "peer", p, "err", err)
	}
	c.pendingMu.Lock()
	c.dropLater[p] = c.dropGen
	c.pendingMu.Unlock()
}

// dropRemoved closes the connections of members removed at least one full
// SyncInterval ago.
func (c *Cluster) dropRemoved() {
	c.pendingMu.Lock()
	var drop []peer.ID
	for p, gen := range c.dropLater {
		if gen < c.dropGen {
			drop = append(drop, p)
			delete(c.dropLater, p)
		}
	}
	c.dropGen++
	c.pendingMu.Unlock()
	for _, p := range drop {
		c.h.dropPeer(p)
	}
}

func (c *Cluster) kickSync() {
	select {
	case c.syncKick <- struct{}{}:
	default:
	}
}

// syncLoop keeps the gater and the address book equal to the Raft configuration:
// at start, on every peer or leader observation, after local membership changes and
// every SyncInterval (followers get no observation for configuration changes).
func (c *Cluster) syncLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SyncInterval)
	defer t.Stop()
	c.syncOnce()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.obsCh:
		case <-c.syncKick:
		case <-t.C:
			c.dropRemoved()
		}
		c.syncOnce()
	}
}

// syncOnce applies the current Raft configuration to the gater and address book.
// Members missing addresses are looked up at the leader, then in the peerstore.
// Pruning only happens when this device is itself in the configuration (a device
// that has not joined yet, or was removed, keeps what it has).
func (c *Cluster) syncOnce() {
	if c.left.Load() {
		return
	}
	f := c.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	servers := f.Configuration().Servers
	self := c.h.ID()
	inCfg := map[peer.ID]bool{}
	selfIn := false
	book := c.h.book.all()
	var missing []peer.ID // members without addresses in the book
	for _, s := range servers {
		p, err := peer.Decode(string(s.ID))
		if err != nil {
			c.log.Error("raft server ID is not a peer ID", "id", s.ID)
			continue
		}
		if p == self {
			selfIn = true
			continue
		}
		inCfg[p] = true
		c.noteRemovedMember(p, 0) // a member (again): no tombstone
		// Admit every member at once, before any address lookup: a lookup asks the
		// leader, which may hang (a stopped process keeps its connections open), and
		// a member refused meanwhile can neither vote nor replicate with this device.
		c.h.gater.setMember(p, true)
		if as, ok := book[p]; !ok || len(as) == 0 {
			missing = append(missing, p)
		}
	}
	for _, p := range missing {
		if err := c.h.AddMember(peer.AddrInfo{ID: p, Addrs: c.lookupAddrs(p)}); err != nil {
			c.log.Error("record member", "peer", p, "err", err)
		}
	}
	if !selfIn || (c.cfg.KeepMembers != nil && c.cfg.KeepMembers()) {
		return
	}
	for p := range book {
		if !inCfg[p] && !c.isPending(p) {
			c.log.Info("member no longer in raft configuration", "peer", p)
			c.noteRemovedMember(p, c.configIndex(f))
			c.forget(p)
		}
	}
}

// lookupAddrs asks the leader for p's addresses, falling back to the peerstore. The
// request is abandoned when the local Raft stops seeing that leader (see forward).
func (c *Cluster) lookupAddrs(p peer.ID) []ma.Multiaddr {
	changed := c.leaderWatch()
	if l := c.Leader(); l != "" && l != c.h.ID() && l != p {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		code, body, err := c.forward(ctx, l, kindAddrs, []byte(p.String()), changed)
		cancel()
		if err == nil && code == codeOK {
			var ss []string
			if json.Unmarshal(body, &ss) == nil {
				if as, err := parseAddrs(ss); err == nil && len(as) > 0 {
					return as
				}
			}
		}
	}
	return c.h.h.Peerstore().Addrs(p)
}

func deadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}

func addrStrings(as []ma.Multiaddr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func parseAddrs(ss []string) ([]ma.Multiaddr, error) {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// ParseSeeds turns multiaddrs with a /p2p/<peer ID> component (the form P2PAddrs
// prints) into AddrInfos for Join, grouping addresses of the same peer.
func ParseSeeds(addrs []string) ([]peer.AddrInfo, error) {
	mas, err := parseAddrs(addrs)
	if err != nil {
		return nil, fmt.Errorf("parse seeds: %w", err)
	}
	infos, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil, fmt.Errorf("parse seeds: %w", err)
	}
	return infos, nil
}
