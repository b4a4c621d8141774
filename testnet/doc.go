// Package testnet runs baton failover drills: a network of devices (node.Node in
// this process, or real `baton run` processes) under load while faults are injected,
// the checker over every device's applied chain and Raft log, a summary per fault
// kind, and JSON and HTML reports. `baton drill` is DrillMain; `baton bench`
// (testnet/bench) and `baton demo` are built on the same network builder, Net.
//
// # Usage
//
// A network, faults and the checker by hand:
//
//	c, err := testnet.NewCluster(testnet.Config{Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond})
//	// or: testnet.NewProcCluster(testnet.ProcsConfig{Bin: "./baton", Nodes: 3})
//	defer c.Close()
//	err = c.Start(ctx)                         // d0 bootstraps, the others join
//	h, epoch, err := c.WaitHolder(ctx, 0)      // the lease holder
//	load, err := testnet.StartLoad(ctx, testnet.LoadConfig{Targets: c.LoadTargets(), Rate: 50, Max: 500})
//	err = c.Kill(h)                            // crash: no release (kill -9 for a process)
//	h2, _, err := c.WaitHolder(ctx, epoch, h)  // a standby takes over
//	err = c.Restart(ctx, h)                    // from its data dir, same port
//	c.Pause(h2); c.Resume(h2)                  // freeze (SIGSTOP/SIGCONT for a process)
//	err = c.Leave(ctx, d); err = c.Rejoin(ctx, d) // the same slot, state wiped, keys kept
//	c.Partition([]*testnet.Device{h2}, rest); c.Heal() // Partitioner: in-process only
//	c.Skew(d, 2*time.Second); c.Drift(d, 1.1)  // ClockControl: in-process only
//	load.Stop()
//	err = c.WaitConverged(ctx, 1)              // same head everywhere, nothing pending
//	in, err := c.Collect(ctx)                  // chains, rejections; stops; every Raft log
//	in.Acked = load.Acks()
//	res := testnet.Check(in)                   // findings, failovers, signatures
//
// A whole scenario, or the CLI:
//
//	rep, err := testnet.RunScenario(ctx, testnet.DrillConfig{Scenario: "kill-holder", Rounds: 3, Seed: 1})
//	rep, err = testnet.RunScenario(ctx, testnet.DrillConfig{Scenario: testnet.SoakScenario, Duration: time.Hour, Procs: true})
//	s := &testnet.Suite{Reports: []testnet.Report{rep}}
//	err = s.WriteFiles("out")                  // out/report.json, out/report.html
//	code := testnet.DrillMain(ctx, []string{"--scenario", "all"}, os.Stdout, os.Stderr)
//
// # What the checker proves
//
// Check reads every device's applied chain, every signed commit found in the devices'
// Raft logs and the load generator's acknowledgement record, in the chain's commit
// format (FormatOf: baton's, or atproto's with Config.Format "atproto"). It reports a
// fork (two commits with one prev on a device, on an atproto chain also one rev or one
// prevData, or two devices holding different commits at one seq), a chain its format
// refuses (chain.VerifyChainOf), on an atproto chain a replica whose stored repository
// is not its chain's, an acknowledged intent missing from the
// chain, an intent id signed twice, two different commits signed for one (seq,
// epoch) (an equivocation), a Commit entry that does not verify, and, in a fault-free
// drill, any signed commit the apply refused. It counts the refused signatures per
// signer and the apply's rejections by reason, and times every failover. A drill
// checks only after the network converged (same head on every device, nothing
// pending), so every acknowledged intent had its chance to be signed. Findings listed
// in KnownIssues are reported as known and do not fail a drill with faults.
//
// # Faults
//
// In process: Kill is Node.Kill (no release); Stop is the graceful Node.Stop; Restart
// reopens the data dir on the same port. Pause cuts the device's links both ways
// (Host.Block on it and on every peer), parks its proposals in Knobs.BeforePropose
// (one already inside the signer stays in flight) and stops its Clock; Resume lets
// everything continue, and the apply's fencing must refuse the stale proposals.
// Partition, Cut and Heal use Host.Block/Unblock. Clock is a per-device real-time
// clock with an offset, a rate and pause; its monotonic reading does not count a
// pause (like a suspended laptop), its wall reading catches up. Processes: kill -9,
// SIGSTOP/SIGCONT, SIGTERM (then SIGKILL after 2×TTL + 10 s), `baton leave`, and
// `baton join` with a fresh invite.
//
// Safety against liveness: the drills assert safety (no fork, nothing acknowledged
// lost or duplicated, no unknown equivocation) strictly; timing is measured against
// the design's bound and reported, and the tests bound it generously because the
// machines they run on are shared.
package testnet
