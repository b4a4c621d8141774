package transport

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"
)

// DefaultProbeInterval is how often a Host probes each member (HostConfig.ProbeInterval).
const DefaultProbeInterval = time.Second

// rttEvery: a member heard from over Raft is pinged once per rttEvery intervals.
const rttEvery = 10

// Path is how this device reaches a member now.
type Path string

const (
	PathNone    Path = ""        // not connected
	PathDirect  Path = "direct"  // a direct TCP connection (dialled, or hole-punched by DCUtR)
	PathRelayed Path = "relayed" // only through a circuit relay (another member)
)

// probeState is one member's measured reachability. Guarded by reach.mu.
type probeState struct {
	inflight  bool
	probed    bool          // a probe has completed since this host started
	ok        bool          // the last probe got its answer
	lastOK    time.Time     // when a probe last got its answer
	rtt       time.Duration // the last answered probe's round trip
	rttAt     time.Time     // when rtt was measured
	err       string        // the last failed probe's error
	path      Path          // the path at the last probe
	relay     peer.ID       // the relay of a relayed path
	pathSince time.Time     // when path (or being unanswered) began
	// pingStart: when the running (or last) ping began; failingSince: when the
	// first of the pings failing in a row began (zero after an answer).
	pingStart, failingSince time.Time
}

// reach probes every member in the address book once per ProbeInterval: it redials
// a member that is not connected (its book and relay addresses) and sends one libp2p
// ping over the connection, so that every device knows by itself whether each member
// answers, how (direct or relayed, through which relay) and the round trip, not only
// the pairs Raft heartbeats connect (leader and followers).
type reach struct {
	mu    sync.Mutex
	peers map[peer.ID]*probeState
}

// probeLoop runs until the host closes.
func (h *Host) probeLoop() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.ProbeInterval)
	defer t.Stop()
	for {
		for p := range h.book.all() {
			if p != h.h.ID() {
				h.startProbe(p)
			}
		}
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// startProbe probes p in the background unless a probe of p is still running.
func (h *Host) startProbe(p peer.ID) {
	h.reach.mu.Lock()
	if h.reach.peers == nil {
		h.reach.peers = map[peer.ID]*probeState{}
	}
	st, ok := h.reach.peers[p]
	if !ok {
		st = &probeState{pathSince: time.Now()}
		h.reach.peers[p] = st
	}
	if st.inflight {
		h.reach.mu.Unlock()
		// A ping into a dead connection can hang beyond its deadline (the stream
		// open waits behind a full send buffer): judge the silence here too.
		h.closeIfSilent(p)
		return
	}
	// Raft traffic within the last interval (leader and followers exchange
	// heartbeats) answers for the member as well as a ping: skip it, but measure
	// the round trip again every rttEvery intervals. This keeps an idle cluster's
	// CPU near what it was without probes; two followers are pinged every interval.
	now := time.Now()
	if seen := h.lastSeen(p); st.probed && st.ok && now.Sub(seen) < h.cfg.ProbeInterval &&
		now.Sub(st.rttAt) < rttEvery*h.cfg.ProbeInterval {
		if path, relay := h.pathTo(p); path != PathNone {
			if path != st.path || relay != st.relay {
				st.pathSince = now
			}
			st.lastOK, st.path, st.relay = seen, path, relay
			h.reach.mu.Unlock()
			return
		}
	}
	st.inflight, st.pingStart = true, now
	h.reach.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		rtt, err := h.probe(p)
		if err != nil {
			h.closeIfSilent(p)
		}
		path, relay := h.pathTo(p)
		now := time.Now()
		h.reach.mu.Lock()
		defer h.reach.mu.Unlock()
		st.inflight = false
		if err == nil {
			if !st.ok || path != st.path || relay != st.relay {
				st.pathSince = now
			}
			st.ok, st.lastOK, st.rtt, st.rttAt, st.err = true, now, rtt, now, ""
			st.failingSince = time.Time{}
		} else {
			if st.ok || !st.probed {
				st.pathSince = now
			}
			st.ok, st.err = false, probeError(err)
			if st.failingSince.IsZero() {
				st.failingSince = st.pingStart
			}
		}
		st.probed, st.path, st.relay = true, path, relay
	}()
}

// probe connects to p if needed and measures one ping round trip, within a probe
// interval (at least a second) and the dial timeout.
func (h *Host) probe(p peer.ID) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(h.ctx, max(h.cfg.ProbeInterval, time.Second))
	defer cancel()
	if h.h.Network().Connectedness(p) != network.Connected {
		if err := h.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
			return 0, err
		}
	}
	// libp2p's Ping closes its channel without a result when ctx ends first: the
	// zero Result read from it would count as an answer (RTT 0), and a dead
	// connection would look alive to every probe.
	res, answered := <-ping.Ping(ctx, h.h, p)
	if !answered {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, errors.New("ping: no answer")
	}
	if res.Error != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, res.Error
	}
	h.touch(p)
	return res.RTT, nil
}

// silentAfter is how long a connected member may stay silent (no probe answered,
// no message received, on connections older than that) before closeIfSilent closes
// its connections.
func (h *Host) silentAfter() time.Duration { return max(5*h.cfg.ProbeInterval, 5*time.Second) }

// closeIfSilent closes p's connections when p is connected but nothing came back
// over them for silentAfter: the connection is dead without either end being told
// (a laptop that moved to another network, a NAT that forgot the mapping, a relay
// gone without a reset), and libp2p would keep it for the 30 s of yamux's keepalive
// and more (TCP's retransmissions, minutes) while every probe pings into it instead
// of dialling again. The next probe dials p afresh (its new address, or a relay).
func (h *Host) closeIfSilent(p peer.ID) {
	conns := h.h.Network().ConnsToPeer(p)
	if len(conns) == 0 {
		return
	}
	latest := h.lastSeen(p)
	if st := h.probeOf(p); st.lastOK.After(latest) {
		latest = st.lastOK
	}
	for _, c := range conns {
		if o := c.Stat().Opened; o.After(latest) {
			latest = o
		}
	}
	if silent := time.Since(latest); silent >= h.silentAfter() {
		h.log.Info("closing a silent connection to a member (it will be dialled again)", "peer", p,
			"silent", silent.Round(time.Millisecond), "conns", len(conns))
		_ = h.h.Network().ClosePeer(p)
		return
	}
	h.closeDeadDirect(p, conns)
}

// closeDeadDirect closes p's direct connections when p is heard from (Raft over a
// relayed connection) but its pings have gone unanswered for silentAfter since the
// newest direct connection opened: libp2p opens streams, pings included, on a
// direct connection when there is one, so that one is dead (a hole-punched
// connection whose NAT mapping went away) and every new stream would go into it
// until yamux's keepalive. The relayed connections stay; the next probe goes over
// them. (Being heard from also skips most pings, so lastOK does not tell.)
func (h *Host) closeDeadDirect(p peer.ID, conns []network.Conn) {
	st := h.probeOf(p)
	var latest time.Time
	switch {
	case !st.failingSince.IsZero():
		latest = st.failingSince
	case st.inflight:
		latest = st.pingStart
	default:
		return
	}
	var direct []network.Conn
	others := 0
	for _, c := range conns {
		if _, relayed := relayOf(c.RemoteMultiaddr()); relayed || c.Stat().Limited {
			others++
			continue
		}
		direct = append(direct, c)
		if o := c.Stat().Opened; o.After(latest) {
			latest = o
		}
	}
	if len(direct) == 0 || others == 0 {
		return
	}
	if unanswered := time.Since(latest); unanswered >= h.silentAfter() {
		h.log.Info("closing a dead direct connection to a member (reached through a relay meanwhile)", "peer", p,
			"unanswered", unanswered.Round(time.Millisecond), "direct", len(direct))
		for _, c := range direct {
			_ = c.Close()
		}
	}
}

// pathTo reports how p is connected now: direct when any connection is, relayed
// (and through which relay) when only relayed connections are.
func (h *Host) pathTo(p peer.ID) (Path, peer.ID) {
	path, relay := PathNone, peer.ID("")
	for _, c := range h.h.Network().ConnsToPeer(p) {
		if r, ok := relayOf(c.RemoteMultiaddr()); ok || c.Stat().Limited {
			path, relay = PathRelayed, r
			continue
		}
		return PathDirect, ""
	}
	return path, relay
}

// relayOf returns the relay's peer ID of a /p2p/<relay>/p2p-circuit address.
func relayOf(a ma.Multiaddr) (peer.ID, bool) {
	var relay peer.ID
	for _, c := range a {
		switch c.Protocol().Code {
		case ma.P_P2P:
			if id, err := peer.Decode(c.Value()); err == nil {
				relay = id
			}
		case ma.P_CIRCUIT:
			return relay, true
		}
	}
	return "", false
}

// probeOf returns a copy of p's probe state (zero when never probed).
func (h *Host) probeOf(p peer.ID) probeState {
	h.reach.mu.Lock()
	defer h.reach.mu.Unlock()
	if st, ok := h.reach.peers[p]; ok {
		return *st
	}
	return probeState{}
}

// forgetProbe drops p's probe state (p left the cluster).
func (h *Host) forgetProbe(p peer.ID) {
	h.reach.mu.Lock()
	defer h.reach.mu.Unlock()
	if st, ok := h.reach.peers[p]; ok && !st.inflight {
		delete(h.reach.peers, p)
	}
}

// probeError says why a probe failed in a few words (libp2p's dial errors span lines).
func probeError(err error) string {
	switch {
	case errors.Is(err, ErrUnreachable):
		return "unreachable: no address accepted a connection"
	case errors.Is(err, ErrHandshake):
		return "handshake failed: wrong or missing network key?"
	case errors.Is(err, ErrRefused):
		return "refused: it does not admit this device"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within the probe timeout"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
