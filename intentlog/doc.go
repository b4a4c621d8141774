// Package intentlog is baton's replicated state machine: the log entry codec, the
// deterministic apply (records, the `__lease__` record, the chain head, pending
// intents, commit fencing), its bbolt storage and snapshots, and a Raft node
// (hashicorp/raft with raft-boltdb/v2) that runs it over a given raft.Transport.
//
// # Usage
//
// Open a node over a transport (in baton the libp2p stream layer, in tests
// raft.NewInmemTransport). Verify decodes and verifies signed commits; package signer
// supplies it.
//
//	l, err := intentlog.Open(intentlog.Config{
//		Dir:     dir,
//		LocalID: raft.ServerID(peerID),
//		Verify:  verify,
//	}, trans)
//	if err != nil { ... }
//	defer l.Close()
//
// On the first device only, bootstrap the cluster (ErrAlreadyBootstrapped when there
// is state already); other devices are added by the leader through Raft().AddVoter.
//
//	err = l.Bootstrap([]raft.Server{{ID: id, Address: addr}})
//
// Propose entries on the leader. A follower gets ErrNotLeader; it forwards the encoded
// entry to Leader(), whose handler calls ApplyEncoded and returns the EncodeResult
// bytes.
//
//	res, err := l.Propose(ctx, intentlog.IntentsEntry{Intents: []intentlog.Intent{
//		{ID: "req-1", Op: intentlog.OpPut, Path: "app.post/3k", Value: v},
//	}})
//
// Read locally, never waiting on Raft: View (an atomic copy of the hot state),
// Pending, Record, Records, Commit, LeaseHistory, Rejections, Members. Wait for
// changes with Watch (a broadcast channel closed after the next applied transaction),
// WaitApplied, or Subscribe (typed events; lossy with a counter, see Subscription).
//
//	for {
//		w := l.Watch() // take the channel before reading
//		v := l.View()
//		if done(v) { break }
//		<-w
//	}
//
// # Determinism
//
// Apply reads only the entry and the stored state: no clock, randomness, environment or
// map iteration order. Every time in the state (lease ts and ttl) comes from an entry.
// Two replicas that applied the same entries hold byte-identical state, and Dump (the
// Raft snapshot format, a canonical logical dump) writes identical bytes on both. Each
// rule of the apply table in docs/DESIGN.md is enforced here; a rejected entry changes
// nothing but its per-reason rejection counter (and the applied index), malformed
// bytes are rejected with ReasonMalformed, and the limits (MaxIDLen, MaxPathLen,
// MaxValueLen, MaxPending, DefaultRetention, LeaseHistoryLen, ...) are constants because changing
// one changes the state machine. Finding an invariant already broken in stored state
// (a corrupt record, a pending count that disagrees with the queue) panics with a
// clear message rather than repairing it silently.
//
// # Durability
//
// state.db (bbolt) holds the whole applied state, including the last applied index,
// in the same transaction as the entries' effects; a batch of Raft entries is one
// transaction. Raft's log (fsynced on every append) and its snapshots are the durable
// record; state.db is their checkpoint, written without a per-transaction fsync,
// synced and marked clean (CleanFile) on Close. A state file found without the mark
// (after a machine crash it may be behind or torn) is set aside and rebuilt from the
// latest snapshot and the log after it. On restart the FSM skips every entry at or below its
// stored index, so Raft's replay never applies an entry twice; Raft is told not to
// restore its latest snapshot when state.db already covers it, and restores it (into a
// new file renamed into place) when state.db is behind or missing. A snapshot that
// fails validation (magic, version, bucket order, key order, checksum) is refused and
// the old state kept. Raft's log and stable store live in raft.db, snapshots under
// snapshots/.
package intentlog
