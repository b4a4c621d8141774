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
// Open checks raft.db and state.db before Raft starts. A corrupt raft.db makes it fail
// with a *CorruptFileError (errors.Is ErrCorrupt): the way out is Repair (baton
// repair), after which the device resyncs from the others. A bad state.db is set aside
// and rebuilt on its own.
//
// On the first device only, bootstrap the cluster (ErrAlreadyBootstrapped when there
// is state already), then propose the chain's genesis (a random nonce makes each
// history's genesis unique); other devices are added by the leader through
// Raft().AddVoter. A node that finds no genesis on a legacy log (View().Genesis.Index
// == 0) proposes one for the chain the log already carries (View().Chain).
//
//	err = l.Bootstrap([]raft.Server{{ID: id, Address: addr}})
//	_, err = l.Propose(ctx, intentlog.GenesisEntry{Chain: did, Version: intentlog.CommitFormatVersion,
//		Nonce: nonce16, TS: time.Now().UnixMilli()})
//
// Propose entries on the leader. A follower gets ErrNotLeader; it forwards the encoded
// entry to Leader(), whose handler calls ApplyEncoded and returns the EncodeResult
// bytes.
//
//	res, err := l.Propose(ctx, intentlog.IntentsEntry{Intents: []intentlog.Intent{
//		{ID: "req-1", Op: intentlog.OpPut, Path: "app.post/3k", Value: v},
//	}})
//
// Validate requests with ValidateIntent before proposing them (it is the apply's own
// rule). A holder may put the intents it signs straight into its commit (carried ops)
// instead of queueing them first; the accepted commit's Result answers each of them.
//
// Read locally, never waiting on Raft: View (an atomic copy of the hot state),
// Pending, Record, Records, Commit, IntentStatus, Genesis, LeaseHistory, Rejections,
// Members, Digest, DigestAt, Fault. Wait for changes with Watch (a broadcast channel
// closed after the next applied transaction), WaitApplied, or Subscribe (typed events;
// lossy with a counter, see Subscription).
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
// map iteration order. Every time in the state (lease ts and ttl, log time) comes from
// an entry. Two replicas that applied the same entries hold byte-identical state, and
// Dump (the Raft snapshot format, a canonical logical dump) writes identical bytes on
// both; their state digests (Digest) agree. Each rule of the apply table in
// docs/DESIGN.md is enforced here; a rejected entry changes nothing but its per-reason
// rejection counter (and the applied index and the digest), malformed bytes are
// rejected with ReasonMalformed, and the limits (MaxIDLen, MaxPathLen, MaxValueLen,
// MaxPending, DefaultRetention, LeaseHistoryLen, ...) are constants because changing
// one changes the state machine. Entries written by an older build (codec version 1)
// keep that version's rules on replay: determinism is per entry bytes.
//
// Corruption is not a rejection. An entry whose checksum fails (ErrCorrupt), a stored
// value that does not verify, or a state that contradicts itself halts the FSM: it
// applies nothing more, Fault reports a *FaultError naming the file and the index or
// key, and the Log refuses proposals; it never panics and never repairs silently.
//
// # Durability
//
// state.db (bbolt) holds the whole applied state, including the last applied index,
// in the same transaction as the entries' effects; a batch of Raft entries is one
// transaction. Raft's log (fsynced on every append) and its snapshots are the durable
// record; state.db is their checkpoint, written without a per-transaction fsync,
// synced and marked clean (CleanFile) on Close. A state file found without the mark
// (after a machine crash it may be behind or torn) is set aside and rebuilt from the
// latest snapshot and the log after it; so is one that fails its start-time check, or
// whose layout is older (set-aside files get unique names and are never overwritten).
// On restart the FSM skips every entry at or below its stored index, so Raft's replay
// never applies an entry twice; Raft is told not to restore its latest snapshot when
// state.db already covers it, and restores it (into a new file renamed into place)
// when state.db is behind or missing. A snapshot that fails validation (magic, version,
// bucket order, key order, every value's checksum, the overall checksum) is refused and
// the old state kept; one of an older layout is converted. A failed write (a full
// disk) is retried, the apply blocking, until it succeeds or the Log closes. Raft's log
// and stable store live in raft.db, snapshots under snapshots/. See DESIGN.md in this
// directory for the reasons.
package intentlog
