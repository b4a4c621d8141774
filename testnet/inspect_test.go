package testnet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/chain/atproto/indigocheck"
)

// indigoInspector hands every device's atproto chain to indigo after a drill
// (DrillConfig.Inspect): each commit's #commit event through VerifyCommitMessage,
// its CAR slice and signature, the relay's rev, future-rev, since and prevData
// checks, and the whole repository's CAR (indigocheck.Chain).
type indigoInspector struct {
	on      bool
	devices int
	commits int // the most commits of one device indigo accepted
}

func inspectFor(format string) *indigoInspector { return &indigoInspector{on: format == "atproto"} }

// inspect is DrillConfig.Inspect; it does nothing on a chain of baton's format.
func (ic *indigoInspector) inspect(in CheckInput) error {
	if !ic.on {
		return nil
	}
	for _, d := range in.Devices {
		res, err := indigocheck.Chain(context.Background(), d.Commits, in.Chain, time.Now())
		if err != nil {
			return fmt.Errorf("%s: indigo refuses its chain: %w", d.Device, err)
		}
		ic.devices++
		ic.commits = max(ic.commits, res.Commits)
	}
	return nil
}

// check fails t unless indigo accepted every device's whole chain.
func (ic *indigoInspector) check(t *testing.T, rep Report) {
	t.Helper()
	if ic.on && (ic.devices != len(rep.Check.Heads) || ic.commits != rep.Check.Commits) {
		t.Errorf("indigo checked %d devices and %d commits, the drill read %d devices and %d commits",
			ic.devices, ic.commits, len(rep.Check.Heads), rep.Check.Commits)
	}
}
