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
	if c.LogTimeClamped > 0 {
		fmt.Fprintf(w, "log time\t%d entries' clocks ran ahead of the last one's (or the chain sat idle): each moved log time by one bounded step; the dedupe window keeps IDs longer, never shorter\n",
			c.LogTimeClamped)
	}
}
