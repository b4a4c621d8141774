package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/node"
)

// status says when this device's clock ran ahead, when log time steps were cut
// (issue 19 item 2) and, on an atproto chain, where the cluster clock revs follow is
// (issue 22), and nothing when all is sane.
func TestStatusClockLines(t *testing.T) {
	var b bytes.Buffer
	printClock(&b, node.ClockState{LogTime: 1, Cluster: &node.ClusterClock{Known: true, OffsetMs: 20, Measured: 2}})
	if b.Len() != 0 {
		t.Fatalf("clock lines for a sane clock: %q", b.String())
	}
	printClock(&b, node.ClockState{Ahead: 2, AheadByMs: 7_200_000, Suspect: true, LogTimeClamped: 3,
		Cluster: &node.ClusterClock{Known: true, OffsetMs: -600_000, Measured: 2}})
	printClock(&b, node.ClockState{Cluster: &node.ClusterClock{Measured: 0}})
	out := b.String()
	for _, want := range []string{"SUSPECTED SKEW", "2h0m0s ahead", "2 clamped", "3 entries",
		"cluster clock\t-10m0s from this device's", "2 other voters'", "cluster clock\tNOT KNOWN: 0 other voters'"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status clock lines %q lack %q", out, want)
		}
	}
}

// TestStatusShowsTheAddressOfThePath: status showed a member's first known address
// whatever the path, so a relayed (p2p-circuit) address appeared under "direct"
// (issue 39 item 9).
func TestStatusShowsTheAddressOfThePath(t *testing.T) {
	relay := "/ip4/203.0.113.7/tcp/7401/p2p/12D3KooWA/p2p-circuit"
	direct := "/ip4/192.168.1.20/tcp/7402"
	for _, tc := range []struct {
		p    node.PeerState
		want string
	}{
		{node.PeerState{Path: "direct", Addrs: []string{relay, direct}}, direct},
		{node.PeerState{Path: "relayed", Addrs: []string{direct, relay}}, relay},
		{node.PeerState{Path: "direct", Addrs: []string{relay}}, "-"},
		{node.PeerState{Addrs: []string{relay, direct}}, direct},
		{node.PeerState{Path: "direct"}, "-"},
	} {
		if got := pathAddr(tc.p); got != tc.want {
			t.Errorf("%s %v: %q, want %q", tc.p.Path, tc.p.Addrs, got, tc.want)
		}
	}
}
