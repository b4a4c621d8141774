// Package sim runs baton's real code under seeded fault schedules in virtual time and
// checks its invariants while it runs (issue 11).
//
// A run is 3 to 5 devices, each a real node assembled by node.New (the intent log's
// apply and bbolt state, Raft with raft-boltdb, the lease and its policy, the signer
// loop, the batcher and the proposal path), inside one testing/synctest bubble:
// every timer of the code under test (Raft's time.After, the loop's, the lease's) is
// on the bubble's virtual clock, and time moves only when every goroutine waits, so
// a run of tens of virtual seconds takes about a second. What is simulated:
//
//   - the network: one directed link per pair of devices, each a queue of messages
//     with a delivery time (delay, jitter, loss, duplication, reordering; cut for a
//     partition, one-way or both), FIFO per class (Raft's messages, forwarded
//     proposals, their answers: streams of one connection); forwarded proposals can
//     be late by themselves. Raft talks over it through a raft.Transport of this
//     package (AppendEntries, RequestVote, RequestPreVote, InstallSnapshot,
//     TimeoutNow; no pipelining) and the node through a node.Network that behaves
//     as transport.Cluster does (local on the leader, forwarded otherwise, retried
//     while there is no leader, abandoned on a leader change, transport's errors;
//     the leader applies a late request within what the caller had left when it
//     sent it, counted from its arrival: a proposal delivered after its proposer
//     gave up), and carries Network.Call to one member's Handlers.Call (the
//     submissions other devices forward to the lease holder) with transport's
//     errors;
//   - each device's clock (Clock): wall offset (steps), rate (0.9x-1.1x), pauses;
//   - crashes (kill -9: the node killed with its network cut first; the clean
//     marker of state.db removed, since the process never closed it) and power cuts
//     (also state.db rolled back to a copy the "page cache" wrote earlier, torn,
//     deleted or kept; raft.db is fsynced on every append and survives), restarts on
//     the same data dir;
//   - disks (profile disk, faults_disk.go): after a crash, a flipped bit in a field of
//     raft.db that Raft trusts (an entry's term, type, a configuration's voter flag,
//     a command's data, the stable term or vote), in state.db, or a torn raft.db; a
//     device must never start on a flipped field (corrupt_store), and is removed,
//     repaired and re-joined at the heal;
//   - time travel (profile timetravel, faults_timetravel.go): dev0 founds the
//     cluster alone (its first bootstrap names only itself) and is copied, dir and
//     mark apart, before the others join as voters; backups copy stopped devices;
//     a restore puts a device's dir back to any of its copies (the founder's
//     pre-join backup, a joiner's empty disk from before it joined, later copies),
//     its mark kept (fence-filters-only: item 1 of issue 38 forks) or, in profile
//     timetravel-whole only, rolled back too (a whole-disk restore: undetected
//     today, the known limit of item 2); in profile timetravel-clone, a copy
//     started beside the original with its identity (faults_clone.go: item 4's
//     known limit);
//   - pauses: SIGSTOP (the clock's readings both catch up on resume) or a suspend
//     (only the wall reading does); the endpoints freeze (nothing sent, arrivals held
//     and delivered on resume) and proposals wait (knobs.Node.BeforePropose);
//   - clients that submit to any device and retry the same ID after errors and
//     timeouts; releases, transfers, operator steals, Raft leadership transfers,
//     member removal and re-join (through the leader's raft.Raft: node.New has no
//     libp2p membership).
//
// The invariants (see checker): no fork (every replica's chain a prefix of one chain,
// verified commit by commit in its format, chain.NewStepper; Config.Format "atproto"
// runs an atproto chain with the repository checks of format.go); no equivocation (a recording
// chain key sees every signature: never two commits for one (seq, epoch); nothing
// signed and left unapplied in a run without faults); every acknowledged intent in
// the chain exactly once, no ID twice, no two acknowledgements of one ID with
// different indexes; epochs never reused and never going back; no claim that takes a
// live lease (checked from the lease history and the time every record was first
// seen), and no two devices holding the lease at one virtual instant outside an
// operator's steal; liveness (after the faults, a probe intent signed within
// TTL (2 TTL after a clock step) + 3 ticks + 2 election timeouts) and convergence.
// A violation names the seed, the virtual time, the replay command and the events
// before it (a ring of the last 4096).
//
// # Usage
//
//	go test ./testnet/sim                          500 seeds (20 with -race, 50 with -short)
//	go test ./testnet/sim -run 'TestSim$' -cpu 1 -seed 42         replay one seed
//	go test ./testnet/sim -run 'TestSim$' -cpu 1 -seed 42 -repeat 20   how often it comes back
//	baton sim --for 1h                             a search in worker processes, with progress
//	baton sim --seed 42                            replay one seed
//
// From Go: Run(t, Config{Seed: 42}) runs one seed; Search(t, SearchOptions{...})
// many. docs/DRILLS.md ("Simulation") has the flags, the profiles, the bugs found and
// the throughput.
package sim
