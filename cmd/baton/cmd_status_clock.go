package main

import (
	"fmt"
	"io"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// printClock adds the clock lines of `baton status`: stamps this device clamped
// because its wall clock ran ahead, and log time steps the apply cut short.
func printClock(w io.Writer, c node.ClockState) {
	if c.Suspect {
		fmt.Fprintf(w, "clock ahead\tSUSPECTED SKEW: this device's wall clock ran %v ahead; its stamps follow the lease record's pace (%d clamped)\n",
			time.Duration(c.AheadByMs)*time.Millisecond, c.Ahead)
	}
	if cc := c.Cluster; cc != nil {
		switch off := time.Duration(cc.OffsetMs) * time.Millisecond; {
		case !cc.Known:
			fmt.Fprintf(w, "cluster clock	NOT KNOWN: %d other voters' clocks measured, fewer than a majority; as holder this device signs no atproto commit until it knows\n", cc.Measured)
		case off >= time.Second || off <= -time.Second:
			fmt.Fprintf(w, "cluster clock	%+v from this device's wall clock (the earliest of it and %d other voters'): atproto revs follow the cluster's\n", off, cc.Measured)
		}
	}
	if c.LogTimeClamped > 0 {
		fmt.Fprintf(w, "log time\t%d entries' clocks ran ahead of the last one's (or the chain sat idle): each moved log time by one bounded step; the dedupe window keeps IDs longer, never shorter\n",
			c.LogTimeClamped)
	}
}
