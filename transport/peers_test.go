package transport

import (
	"flag"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Peers tells a live member (connected, heard from within heartbeats) from a frozen
// one (still connected, silent, its Raft writes stalled) and from a cut-off one (not
// connected).
func TestPeers(t *testing.T) {
	tc, f, px, live := newFrozenCluster(t, func(n *node) {
		n.rtweak = func(c *RaftTransportConfig) { c.MaxRPCsInFlight = 32 } // fill the window when f freezes
	}, false)
	leader := tc.leader(tc.nodes)
	var other *node // the live follower
	for _, n := range live {
		if n != leader {
			other = n
		}
	}
	status := func(n, of *node) PeerStatus {
		t.Helper()
		ps, err := n.cluster.Peers()
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 3 {
			t.Fatalf("%d peers, want 3: %+v", len(ps), ps)
		}
		for _, p := range ps {
			if p.ID == of.id() {
				return p
			}
		}
		t.Fatalf("%s missing from %s's peers", of.id(), n.id())
		return PeerStatus{}
	}
	fresh := func(p PeerStatus) bool { return p.Connected && time.Since(p.LastSeen) < time.Second }

	// At rest: the leader hears from both followers, each follower from the leader.
	waitFor(t, 5*time.Second, "every follower heard from by the leader and vice versa", func() bool {
		return fresh(status(leader, f)) && fresh(status(leader, other)) && fresh(status(other, leader)) && fresh(status(f, leader))
	})
	me := status(leader, leader)
	if !me.Self || !me.Leader || !me.Connected || len(me.Addrs) == 0 {
		t.Fatalf("leader's own entry: %+v", me)
	}
	l := status(other, leader)
	if !l.Leader || l.LastContact.IsZero() || len(l.Addrs) == 0 || len(l.ConnAddrs) == 0 {
		t.Fatalf("the leader seen from a follower: %+v", l)
	}

	// Frozen: still connected, silent, and its Raft writes stall.
	px.Freeze()
	defer px.Thaw()
	frozeAt := time.Now()
	big := make([]byte, 64<<10)
	for i := range 48 {
		if _, err := leader.cluster.Propose(ctxTimeout(t, patient), fmt.Appendf(nil, "%d:%s", i, big)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the frozen follower silent but connected, with a stalled write", func() bool {
		p := status(leader, f)
		return p.Connected && time.Since(p.LastSeen) > time.Second && p.Stalled > 0
	})
	p := status(leader, f)
	t.Logf("frozen follower on the leader: connected %v, last seen %v after the freeze, write stalled %v",
		p.Connected, p.LastSeen.Sub(frozeAt).Round(time.Millisecond), p.Stalled.Round(time.Millisecond))
	waitFor(t, 5*time.Second, "the live follower heard from meanwhile", func() bool { return fresh(status(leader, other)) })

	// Cut off: not connected.
	partition([]*node{leader}, []*node{other})
	waitFor(t, 5*time.Second, "the cut-off follower reported not connected", func() bool {
		return !status(leader, other).Connected
	})
}

var idleCPU = flag.Duration("transport.idlecpu", 0, "measure TestIdleCPU over this long (skipped when 0)")

// TestIdleCPU measures the CPU a three-device cluster uses at rest with raft's
// default timings (heartbeats every 100 ms), per device: go test -run TestIdleCPU
// -transport.idlecpu 20s ./transport (without -race). The bound is 1% of a core.
func TestIdleCPU(t *testing.T) {
	if *idleCPU == 0 {
		t.Skip("set -transport.idlecpu to measure")
	}
	tc := newTestClusterWith(t, 3, func(n *node) {
		n.tweak = func(c *raft.Config) {
			d := raft.DefaultConfig()
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout, d.CommitTimeout
		}
		n.ctweak = func(_ *node, c *ClusterConfig) { c.SyncInterval = DefaultSyncInterval }
	})
	leader := tc.leader(tc.nodes)
	if _, err := tc.followers(leader)[0].cluster.Propose(ctxTimeout(t, patient), []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, tc.nodes, []byte("x"))
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0, w0 := cpu(), time.Now()
	time.Sleep(*idleCPU) // the measurement window, not synchronisation
	used, wall := cpu()-c0, time.Since(w0)
	perDevice := float64(used) / float64(wall) / 3 * 100
	t.Logf("at rest: %v CPU in %v for 3 devices: %.3f%% of a core per device", used.Round(time.Millisecond), wall.Round(time.Millisecond), perDevice)
	for _, n := range tc.nodes {
		if _, err := n.cluster.Peers(); err != nil {
			t.Fatal(err)
		}
	}
	if perDevice >= 1 {
		t.Fatalf("%.3f%% of a core per device at rest, want < 1%%", perDevice)
	}
}
