// Package bench is `baton bench`: throughput, latency, failover and at-rest figures of
// a three-device baton cluster, with a plain-Raft baseline measured in the same run
// and baton's figures printed as ratios to it. docs/BENCHMARKS.md holds the figures,
// the machine and what limits each one.
//
// The baton cluster is three node.Nodes in this process over real libp2p on
// 127.0.0.1 with real bolt files (testnet.Cluster, without its timeline recorder);
// the at-rest run over processes is a testnet.ProcCluster; the baseline is three hashicorp/raft nodes
// with raft-boltdb and raft's TCP transport applying the same commands to a trivial
// FSM (Baseline). Sections: load (1, 16, 64 clients through Node.Submit and through
// the Unix-socket API, accepted and signed), failover (hard kills of the holder, with
// and without Raft leadership, and graceful releases), rest (an idle window: Raft
// entries per TTL, disk around snapshots, RSS and CPU; with --procs also over three
// `baton run` processes, per device).
//
// # Usage
//
// From the command line (cmd/baton dispatches `baton bench` to Main):
//
//	baton bench --quick                       # CI: under two minutes, prints the table
//	baton bench -v --procs --out bench.json   # the full run (about 10 minutes)
//
// From Go:
//
//	r := bench.Run(ctx, bench.QuickOptions())
//	r.Print(os.Stdout)
//	_ = r.WriteJSON("bench.json")
//
// Timings are reported, never asserted: the package's tests check that every section
// produces its rows, not how fast they are.
package bench
