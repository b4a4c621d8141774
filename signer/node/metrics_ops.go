package node

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Operator metrics beyond the core's: build info, lease expiry and holder, quorum and
// per-peer reachability (the takeover histogram and the process collector are
// registered beside them in newMetrics).
var (
	descBuild       = prometheus.NewDesc("baton_build_info", "The running binary: module version, VCS revision and Go version (always 1).", []string{"version", "revision", "goversion"}, nil)
	descExpires     = prometheus.NewDesc("baton_lease_expires_in_seconds", "When the lease ends as this device's policy sees it (another holder's: when this device may claim it; its own: when its may-sign window closes); 0 when free or lapsed.", nil, nil)
	descHolder      = prometheus.NewDesc("baton_lease_holder", "The lease holder as this device sees it (1 for the holder's peer ID and name; no series when free).", []string{"holder", "name"}, nil)
	descFree        = prometheus.NewDesc("baton_lease_free", "1 when the lease is free (released, never held, or lapsed) as this device sees it.", nil, nil)
	descQuorum      = prometheus.NewDesc("baton_raft_quorum", "1 when this device reaches a Raft quorum (it leads, or hears from a leader).", nil, nil)
	descVoters      = prometheus.NewDesc("baton_raft_voters", "Voters in the Raft configuration.", nil, nil)
	descReachVoters = prometheus.NewDesc("baton_raft_reachable_voters", "Voters this device reaches (itself included).", nil, nil)
	descPeerUp      = prometheus.NewDesc("baton_peer_reachable", "1 when the member is reachable from this device (see PeerState.Reachable).", []string{"peer", "name"}, nil)
	descPeerSeen    = prometheus.NewDesc("baton_peer_last_seen_seconds", "Seconds since a message from the member was last received (no series when never).", []string{"peer", "name"}, nil)
	descPeerRTT     = prometheus.NewDesc("baton_peer_rtt_seconds", "Round trip of this device's last answered probe of the member (0 for itself; no series before the first answer).", []string{"peer", "name"}, nil)
	descPeerRelayed = prometheus.NewDesc("baton_peer_relayed", "1 when the member is connected only through a relay (another member), 0 when directly (no series when not connected).", []string{"peer", "name"}, nil)
	descRemoved     = prometheus.NewDesc("baton_removed", "1 once this device left or was removed from its cluster.", nil, nil)
)

// collectOps emits the operator gauges from st, the scrape's one State.
func collectOps(g func(d *prometheus.Desc, v float64, lv ...string), st State) {
	b := func(x bool) float64 {
		if x {
			return 1
		}
		return 0
	}
	version, revision, gov := "(devel)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		gov = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g(descBuild, 1, version, revision, gov)
	g(descExpires, float64(st.Lease.ExpiresInMs)/1000)
	if st.Lease.Holder != "" {
		g(descHolder, 1, st.Lease.Holder, st.NameOf(st.Lease.Holder))
	}
	g(descFree, b(st.Lease.Free))
	g(descQuorum, b(st.Quorum.OK))
	g(descVoters, float64(st.Quorum.Voters))
	g(descReachVoters, float64(st.Quorum.Reachable))
	for _, p := range st.Peers {
		g(descPeerUp, b(p.Reachable), p.ID, p.Name)
		if p.LastSeenMs >= 0 {
			g(descPeerSeen, float64(p.LastSeenMs)/1000, p.ID, p.Name)
		}
		switch {
		case p.Self:
			g(descPeerRTT, 0, p.ID, p.Name)
			g(descPeerRelayed, 0, p.ID, p.Name)
		default:
			if p.RTTMicros > 0 {
				g(descPeerRTT, float64(p.RTTMicros)/1e6, p.ID, p.Name)
			}
			if p.Path != "" {
				g(descPeerRelayed, b(p.Path == "relayed"), p.ID, p.Name)
			}
		}
	}
	g(descRemoved, b(st.Removed))
}
