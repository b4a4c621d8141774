// Command baton runs a baton device: one binary with subcommands to create a device's
// keys (init), add and remove devices (invite, join, leave, members), run the node
// (run), operate it over its local API (status, submit, tail, export, lease, watch,
// exec), check an exported chain (verify), watch a three-device cluster fail over on
// one machine (demo), run failover drills and benchmarks (drill, bench, from testnet),
// and print shell completion and manual pages (completion, man). The command line is
// spf13/cobra's: GNU-style --flags, `baton help CMD`.
//
// # Usage
//
//	baton demo                                        # three devices in one process
//	baton init --data DIR --new-chain                 # first device: new chain + network key
//	baton run --data DIR [--listen ADDRS] [--ttl D]   # run the node (Ctrl-C: graceful stop)
//	baton invite --data DIR --with-chain-key          # one-line invite, from a running node
//	baton join --data DIR2 --invite-file FILE         # another device joins (initializes DIR2)
//	baton status|submit|tail|export|lease|watch|members|leave --data DIR ...
//	baton exec --data DIR -- CMD ARGS                 # run CMD while DIR's device holds the lease
//	baton verify --chain DID chain.ndjson
//
// Every flag can also be set as BATON_<FLAG> (upper case, dashes as underscores); a
// flag on the command line wins. --data defaults to ~/.baton.
//
// # Data dir
//
// init writes identity.key (the device's libp2p key), network.key (the private
// network key, swarm key format), chain.key (the chain key; absent on a replica that
// never signs) and device.json (the chain's did:key; whether this device founded the
// cluster and so bootstraps on its first run); package signer/device reads and writes
// them. The node adds members.json, raft.db, state.db, snapshots/ and the API socket
// baton.sock (mode 0600); run holds baton.lock, and writes removed.json when the device
// leaves or is removed.
//
// # Exit status
//
// 0 on success, 1 on a failure (one line on stderr), 2 on a usage error (bad flags,
// arguments or environment values), 3 when run or join finds this device removed from
// its cluster by another member, or starts on a data dir that left (a service manager
// must not restart it; `baton leave` itself stops the node with 0), 130 when a second signal aborts a graceful stop.
// verify exits 1 naming the first bad commit's seq; demo and drill exit 1 when a check
// failed; exec exits with its command's status, or 1 when the hold ended under it.
//
// # Signals
//
// The first SIGINT or SIGTERM cancels the command: a running node stops gracefully
// (API closed, lease released if held, then cluster, Raft, stores and host in order).
// A second signal exits at once.
package main
