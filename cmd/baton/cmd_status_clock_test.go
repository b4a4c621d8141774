package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/node"
)

// status says when this device's clock ran ahead and when log time steps were cut
// (issue 19 item 2), and nothing when neither happened.
func TestStatusClockLines(t *testing.T) {
	var b bytes.Buffer
	printClock(&b, node.ClockState{LogTime: 1})
	if b.Len() != 0 {
		t.Fatalf("clock lines for a sane clock: %q", b.String())
	}
	printClock(&b, node.ClockState{Ahead: 2, AheadByMs: 7_200_000, Suspect: true, LogTimeClamped: 3})
	out := b.String()
	for _, want := range []string{"SUSPECTED SKEW", "2h0m0s ahead", "2 clamped", "3 entries"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status clock lines %q lack %q", out, want)
		}
	}
}
