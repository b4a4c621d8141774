// Command baton runs a baton device: one binary with subcommands to create a device's
// keys (init), add devices (invite, join), run the node (run), operate it over its
// local API (status, submit, tail, export, lease, leave), check an exported chain
// (verify), watch a three-device cluster fail over on one machine (demo), and run
// failover drills and benchmarks (drill, bench, from testnet).
//
// # Usage
//
//	baton demo                                        # three devices in one process
//	baton init --data DIR --new-chain                 # first device: new chain + network key
//	baton run --data DIR [--listen ADDRS] [--ttl D]   # run the node (Ctrl-C: graceful stop)
//	baton invite --data DIR --with-chain-key          # one-line invite, from a running node
//	baton join --data DIR2 INVITE                     # another device joins (initializes DIR2)
//	baton status|submit|tail|export|lease|leave --data DIR ...
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
// cluster and so bootstraps on its first run). The node adds members.json, raft.db,
// state.db, snapshots/ and the API socket baton.sock (mode 0600); run holds baton.lock.
//
// # Exit status
//
// 0 on success, 1 on a failure (one line on stderr), 2 on a usage error (bad flags,
// arguments or environment values), 130 when a second signal aborts a graceful stop.
// verify exits 1 naming the first bad commit's seq; demo and drill exit 1 when a check
// failed.
//
// # Signals
//
// The first SIGINT or SIGTERM cancels the command: a running node stops gracefully
// (API closed, lease released if held, then cluster, Raft, stores and host in order).
// A second signal exits at once.
package main
