package transport

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// PeerStatus is one Raft member's reachability as this device sees it, for
// operators: a member that is connected but has not been heard from for several
// heartbeats is hung (stopped, frozen, or behind a link that drops everything); one
// that is not connected is down or cut off.
type PeerStatus struct {
	ID       peer.ID
	Suffrage raft.ServerSuffrage // raft.Voter or raft.Nonvoter
	Self     bool                // this device (Connected is true, the times are zero)
	Leader   bool                // the Raft leader as known locally

	// Addrs are the member's known listen addresses (the address book; this device's
	// own listen addresses for Self).
	Addrs []ma.Multiaddr
	// Connected reports an open libp2p connection to the member now.
	Connected bool
	// ConnAddrs are the remote addresses of those connections.
	ConnAddrs []ma.Multiaddr

	// LastSeen is when a message from the member was last received: a Raft request
	// or answer, a forwarded request or its answer, a call. Zero: none since this
	// host started. The leader and its followers exchange heartbeats (about ten per
	// raft HeartbeatTimeout), so on the leader every follower's, and on a follower
	// the leader's, stays within a heartbeat interval of now. Two followers exchange
	// nothing at rest: between them only Connected tells.
	LastSeen time.Time
	// LastContact is Raft's own last contact with the leader (raft.Raft.LastContact),
	// on the leader's entry when this device follows; zero otherwise.
	LastContact time.Time
	// Stalled is how long the oldest Raft write to the member in progress has been
	// waiting: it accepts no data (a full window). 0 when no write waits.
	Stalled time.Duration

	// This device's own probes of the member (every HostConfig.ProbeInterval: a
	// redial when not connected, then one ping), whatever the Raft roles.
	// Probed: a probe has completed since this host started (otherwise the fields
	// below are zero). Answering: the last probe got its answer.
	Probed, Answering bool
	// LastAnswer is when a probe last got its answer (zero: never).
	LastAnswer time.Time
	// RTT is the round trip of the last answered probe.
	RTT time.Duration
	// ProbeErr is the last failed probe's error ("" when the last one answered).
	ProbeErr string
	// Path is how the member is connected now: direct, relayed (through Relay, a
	// member serving as circuit relay) or none.
	Path  Path
	Relay peer.ID
	// Since is when the current state began: this path while answering, or the
	// first unanswered probe.
	Since time.Time
	// ProbeInterval is the probe period (to judge how recent LastAnswer is).
	ProbeInterval time.Duration
}

// Peers reports every member of the Raft configuration (as last applied locally),
// this device included, with its reachability. It reads local state only: no
// message is sent and nothing waits for a quorum. Two things feed it: LastSeen is
// one atomic store per Raft read and per forwarded message, and the host's probe
// loop measures every member (answering, path, round trip) once per ProbeInterval.
func (c *Cluster) Peers() ([]PeerStatus, error) {
	f := c.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	book := c.h.book.all()
	leader := c.Leader()
	self := c.h.ID()
	nw := c.h.h.Network()
	layer := c.h.raftLayer.Load()
	var lastContact time.Time
	if lc, ok := c.r.(interface{ LastContact() time.Time }); ok && c.r.State() != raft.Leader {
		lastContact = lc.LastContact()
	}
	var out []PeerStatus
	for _, s := range f.Configuration().Servers {
		p, err := peer.Decode(string(s.ID))
		if err != nil {
			return nil, fmt.Errorf("peers: server ID %q: %w", s.ID, err)
		}
		st := PeerStatus{ID: p, Suffrage: s.Suffrage, Leader: p == leader, Addrs: book[p]}
		if p == self {
			st.Self, st.Connected, st.Addrs = true, true, c.h.Addrs()
			out = append(out, st)
			continue
		}
		st.Connected = nw.Connectedness(p) == network.Connected
		for _, conn := range nw.ConnsToPeer(p) {
			st.ConnAddrs = append(st.ConnAddrs, conn.RemoteMultiaddr())
		}
		st.LastSeen = c.h.lastSeen(p)
		if st.Leader {
			st.LastContact = lastContact
		}
		if layer != nil {
			st.Stalled = layer.blockedWrite(p)
		}
		pr := c.h.probeOf(p)
		st.Probed, st.Answering, st.LastAnswer, st.RTT, st.ProbeErr = pr.probed, pr.probed && pr.ok, pr.lastOK, pr.rtt, pr.err
		st.Relay, st.Since, st.ProbeInterval = pr.relay, pr.pathSince, c.h.cfg.ProbeInterval
		st.Path, st.Relay = c.h.pathTo(p)
		if !pr.probed {
			st.Since = time.Time{}
		}
		out = append(out, st)
	}
	return out, nil
}
