package node

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// PeerState is one Raft member as this device sees it (State.Peers, GET /v1/peers):
// whether it is reachable and when it was last heard from.
type PeerState struct {
	ID     string   `json:"id"`
	Name   string   `json:"name,omitempty"` // the name it gave (Config.Name), "" when unknown
	Voter  bool     `json:"voter"`
	Leader bool     `json:"leader"` // the Raft leader as known locally
	Self   bool     `json:"self"`   // this device
	Addrs  []string `json:"addrs,omitempty"`
	// Connected: an open libp2p connection to the member now.
	Connected bool `json:"connected"`
	// Reachable: this device's own probe (a ping every probe interval, redialling
	// when needed) got an answer within the last three intervals, and, where this
	// device expects Raft heartbeats (it leads, or the member does), heard from
	// within a few heartbeats and no Raft write stalled. Unknown: no probe has
	// completed yet since this device started (the first second or so).
	Reachable bool `json:"reachable"`
	Unknown   bool `json:"reachability_unknown,omitempty"`
	// Path: how the member is connected now, "direct", "relayed" (through Relay,
	// a member serving as circuit relay) or "" (not connected).
	Path  string `json:"path,omitempty"`
	Relay string `json:"relay,omitempty"`
	// RTTMicros: the last answered probe's round trip (0: none yet).
	RTTMicros int64 `json:"rtt_us,omitempty"`
	// SinceMs: how long ago the current state began (this path while reachable,
	// the first unanswered probe otherwise); -1 when unknown.
	SinceMs int64 `json:"since_ms"`
	// ProbeError: the last failed probe's error ("" when it answered).
	ProbeError string `json:"probe_error,omitempty"`
	// LastSeenMs: how long ago a message from the member was last received (-1: never
	// since this device started; 0 for this device itself).
	LastSeenMs int64 `json:"last_seen_ms"`
	// StalledMs: how long the oldest Raft write to the member has been waiting (0: none).
	StalledMs int64 `json:"stalled_ms,omitempty"`
}

// QuorumState is whether this device can reach a Raft quorum, as far as it can tell
// from local state.
type QuorumState struct {
	OK     bool `json:"ok"`
	Voters int  `json:"voters"`
	// Reachable counts the voters this device knows to be reachable, itself
	// included (its own probes of every member, Raft heartbeats with the leader).
	Reachable int `json:"reachable_voters"`
	Needed    int `json:"needed"` // a majority of the voters
	// LeaderlessMs: how long this device has had no leader it hears from (0 when it
	// has one).
	LeaderlessMs int64 `json:"leaderless_ms,omitempty"`
}

// raftTimeouts returns Raft's heartbeat and election timeouts (as configured, also
// while the fence holds Raft's campaign).
func (n *Node) raftTimeouts() (hb, el time.Duration) { return n.log.RaftTimeouts() }

// Peers returns every member of the Raft configuration with its reachability (nil
// for a node built by New, which has no libp2p cluster). It reads local state only.
func (n *Node) Peers() ([]PeerState, error) {
	if n.cluster == nil {
		return nil, nil
	}
	ps, err := n.cluster.Peers()
	if err != nil {
		return nil, err
	}
	hb, el := n.raftTimeouts()
	window := 3 * max(hb, el)
	selfLeads := n.log.Raft().State() == raft.Leader
	now := time.Now()
	out := make([]PeerState, 0, len(ps))
	for _, p := range ps {
		s := PeerState{ID: p.ID.String(), Name: n.NameOf(p.ID.String()), Voter: p.Suffrage == raft.Voter, Leader: p.Leader, Self: p.Self,
			Connected: p.Connected, LastSeenMs: -1, StalledMs: p.Stalled.Milliseconds(), SinceMs: -1,
			Path: string(p.Path), RTTMicros: p.RTT.Microseconds(), ProbeError: p.ProbeErr}
		if p.Relay != "" {
			s.Relay = p.Relay.String()
		}
		if !p.Since.IsZero() {
			s.SinceMs = now.Sub(p.Since).Milliseconds()
		}
		for _, a := range p.Addrs {
			s.Addrs = append(s.Addrs, a.String())
		}
		switch {
		case p.Self:
			s.LastSeenMs, s.Reachable = 0, true
		default:
			if !p.LastSeen.IsZero() {
				s.LastSeenMs = now.Sub(p.LastSeen).Milliseconds()
			}
			heard := !p.LastSeen.IsZero() && now.Sub(p.LastSeen) < window
			answers := p.Answering && now.Sub(p.LastAnswer) < 3*p.ProbeInterval
			expect := selfLeads || p.Leader
			switch {
			case expect:
				// Raft's heartbeats are the finer signal here: a member whose Raft is
				// silent is not reachable, whatever its ping says.
				s.Reachable = heard && p.Stalled < window
			case p.Probed:
				s.Reachable = answers && p.Stalled < window
			default:
				s.Unknown = true
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// QuorumLost returns an error wrapping ErrNoQuorum when this device knows it reaches
// no Raft quorum: it has heard from no leader for at least an election timeout and
// reaches fewer voters than a majority (State.Quorum). A submit would then wait its
// whole deadline for an outcome the device can foresee; the API answers at once
// instead, before anything is proposed. nil when it cannot tell (a node built by New).
func (n *Node) QuorumLost() error {
	r := n.log.Raft()
	_, el := n.raftTimeouts()
	if _, lid := r.LeaderWithID(); r.State() == raft.Leader || lid != "" && time.Since(r.LastContact()) < el {
		return nil // the cheap answer of every submit while a leader is heard
	}
	ps, err := n.Peers()
	if err != nil || len(ps) == 0 {
		return nil
	}
	q := n.quorum(ps)
	leaderless := time.Duration(q.LeaderlessMs) * time.Millisecond
	if q.OK || q.Voters == 0 || q.Reachable >= q.Needed || leaderless < el {
		return nil
	}
	return fmt.Errorf("%w: this device has heard from no Raft leader for %s and reaches %d of %d voters (%d needed)",
		ErrNoQuorum, leaderless.Round(100*time.Millisecond), q.Reachable, q.Voters, q.Needed)
}

// majority is how many of voters make a quorum.
func majority(voters int) int { return voters/2 + 1 }

// quorum derives QuorumState from the peers and Raft's view of the leader.
func (n *Node) quorum(peers []PeerState) QuorumState {
	var q QuorumState
	for _, p := range peers {
		if p.Voter {
			q.Voters++
			if p.Reachable {
				q.Reachable++
			}
		}
	}
	q.Needed = majority(q.Voters)
	r := n.log.Raft()
	hb, el := n.raftTimeouts()
	_, lid := r.LeaderWithID()
	switch {
	case r.State() == raft.Leader:
		q.OK = true
	case lid != "":
		lc := r.LastContact()
		q.OK = !lc.IsZero() && time.Since(lc) < 2*max(hb, el)
		if !q.OK && !lc.IsZero() {
			q.LeaderlessMs = time.Since(lc).Milliseconds()
		}
	default:
		if lc := r.LastContact(); !lc.IsZero() {
			q.LeaderlessMs = time.Since(lc).Milliseconds()
		} else {
			q.LeaderlessMs = time.Since(n.ops.started).Milliseconds()
		}
	}
	if q.Voters == 0 { // a node built by New: trust Raft alone
		q.Needed = 0
	}
	return q
}
