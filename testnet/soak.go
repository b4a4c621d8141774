package testnet

import (
	"context"
)

// soakFault is one kind of fault the soak draws from.
type soakFault struct {
	kind string
	run  func(ctx context.Context, d *Drill, onHolder bool) error
	// target: how often it hits the holder (the rest, a random standby); 1 for the
	// faults that are the holder's by nature.
	holder float64
	procs  bool // a process can suffer it (kill -9, SIGSTOP, SIGTERM, leave/join)
}

// soakFaults are every fault kind; the soak draws them uniformly (those the network
// supports), its target by the kind's holder share.
var soakFaults = []soakFault{
	{FaultKill, faultKill, 2.0 / 3, true},
	{FaultPause, faultPause, 2.0 / 3, true},
	{FaultRestart, faultRestart, 2.0 / 3, true},
	{FaultChurn, faultChurn, 0, true},
	{FaultPartition, faultPartition, 1, false},
	{FaultPartial, faultPartial, 1, false},
	{FaultSkew, faultSkew, 1, false},
	{FaultRelease, faultRelease, 1, false},
	{FaultTransfer, faultTransfer, 1, false},
}

// stepSoak injects one fault drawn at random from every kind the network supports:
// over processes kill -9, SIGSTOP/SIGCONT, SIGTERM and restart, leave and rejoin;
// in this process also partitions (whole and partial), clock skew, release and
// transfer. The draw comes from the drill's seeded rand, so a seed replays the same
// sequence of kinds and targets (timing still varies).
func stepSoak(ctx context.Context, d *Drill, _ int) error {
	var fs []soakFault
	for _, f := range soakFaults {
		if f.procs || d.Net.Kind() == KindInProcess {
			fs = append(fs, f)
		}
	}
	f := fs[d.Rand.Intn(len(fs))]
	onHolder := d.Rand.Float64() < f.holder
	return f.run(ctx, d, onHolder)
}
