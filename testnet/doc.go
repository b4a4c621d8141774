// Package testnet runs baton failover drills: in-process clusters of node.Node over
// real libp2p, Raft and bbolt on 127.0.0.1 with fault injection, a load generator, the
// chain/intent checker, JSON and HTML reports with a timeline picture, and a
// multi-process mode that drives the real `baton` binary. `baton drill` is DrillMain.
//
// # Usage
//
// A cluster, faults and the checker by hand:
//
//	c, err := testnet.NewCluster(testnet.Config{Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond})
//	defer c.Close()
//	err = c.Start(ctx)                         // d0 bootstraps, the others join
//	h, epoch, err := c.WaitHolder(ctx, 0)      // the lease holder
//	load, err := testnet.StartLoad(ctx, testnet.LoadConfig{Targets: c.LoadTargets(), Rate: 50, Max: 500})
//	err = c.Kill(h)                            // crash: no release
//	h2, _, err := c.WaitHolder(ctx, epoch, h)  // a standby takes over
//	err = c.Restart(ctx, h)                    // from its data dir
//	c.Pause(h2); c.Resume(h2)                  // freeze network, proposals and clock
//	c.Partition([]*testnet.Device{h2}, rest); c.Heal()
//	c.Skew(d, 2*time.Second); c.Drift(d, 1.1)  // wall clock offset, rate
//	d, err := c.AddDevice(ctx); err = c.RemoveDevice(ctx, d)
//	load.Stop()
//	err = c.WaitConverged(ctx, 1)              // same head everywhere, nothing pending
//	res, err := c.Check(load.Acks())           // forks, validity, lost, duplicates, failovers
//
// A whole scenario, or the CLI:
//
//	rep, err := testnet.RunScenario(ctx, testnet.DrillConfig{Scenario: "kill-holder", Rounds: 3, Seed: 1})
//	s := &testnet.Suite{Reports: []testnet.Report{rep}}
//	err = s.WriteFiles("out")                  // out/report.json, out/report.html
//	code := testnet.DrillMain(ctx, []string{"--scenario", "all"}, os.Stdout, os.Stderr)
//
// # What the checker proves
//
// Check reads every device's applied chain and the load generator's acknowledgement
// record. It reports a fork (two commits with one prev on a device, or two devices
// holding different commits at one seq), a chain chain.VerifyChain refuses (links,
// signatures, epochs), an acknowledged intent missing from the chain, an intent id
// signed twice, and every failover (last commit of the old epoch to the first of the
// new, timed by the recorder's observations when it has them). A drill checks only
// after the cluster converged (same head on every device, nothing pending), so every
// acknowledged intent had its chance to be signed.
//
// # Faults
//
// Kill is Node.Kill (no release); StopDevice is the graceful Node.Stop; Restart reopens
// the data dir on the same port. Pause cuts the device's links both ways
// (Host.Block on it and on every peer), parks its proposals in Knobs.BeforePropose
// (one already inside the signer stays in flight) and stops its Clock; Resume lets
// everything continue, and the apply's fencing must refuse the stale proposals.
// Partition and Heal use Host.Block/Unblock. Clock is a per-device real-time clock
// with an offset, a rate and pause; its monotonic reading does not count a pause
// (like a suspended laptop), its wall reading catches up.
//
// Safety against liveness: the drills assert safety (no fork, nothing acknowledged
// lost or duplicated) strictly; timing is measured and reported, and the tests bound
// it generously because the machines they run on are shared.
package testnet
