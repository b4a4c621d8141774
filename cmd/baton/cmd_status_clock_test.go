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
