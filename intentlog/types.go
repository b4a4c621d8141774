package intentlog

// This file fixes the types that other packages (election, signer, transport glue)
// build on. Change them only together with their users.

// Op is what an intent does to a record.
type Op uint8

const (
	OpPut Op = 1
	OpDel Op = 2
)

// String returns "put" or "del" (the commit format's spelling).
func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDel:
		return "del"
	}
	return "invalid"
}

// Intent is one requested change to a record. ID is chosen by the client and is the
// idempotency key: the same ID submitted twice is applied once.
type Intent struct {
	ID    string
	Op    Op
	Path  string // collection/rkey
	Value []byte // nil for OpDel
}

// Lease is the stored `__lease__` record. An empty Holder means free (released or
// never held); Epoch is kept on release so that epochs are never reused.
type Lease struct {
	Holder string // libp2p peer ID of the holder, "" when released
	Epoch  uint64
	TS     int64 // holder's wall clock at the write, unix ms
	TTL    int64 // ms
	// Rev is the record's revision: the Raft index of the last accepted lease entry
	// (claim, steal, renew, release, transfer); 0 before the first. Every lease write
	// names the Rev it was decided on (PrevRev), so a write decided on an older record
	// loses: compare-and-set on the whole record.
	Rev uint64
	// Nonce is the ClaimEntry.Nonce of the claim that started this hold: which process
	// of the holder claimed it (a random number each process picks). A renewal keeps
	// it; a release, a transfer and a claim without one leave 0. The holder's Lease
	// compares it, with epoch and ts, to know a record for the outcome of its own claim:
	// ts alone repeats across a restart within one millisecond.
	Nonce uint64
}

// Head is the last applied commit of the chain. Seq 0 means an empty chain.
type Head struct {
	Seq    uint64
	Hash   [32]byte // SHA-256 of the full commit encoding; zero when Seq == 0
	Epoch  uint64
	Signer string
}

// CommitInfo is what the apply needs to know about a signed commit. The commit format
// belongs to package signer; the apply sees it only through a CommitVerifier.
type CommitInfo struct {
	Chain  string // the chain key's did:key, as the commit names it (`chain`)
	Seq    uint64
	Epoch  uint64
	Signer string
	Prev   []byte // nil at Seq 1, else 32 bytes
	Ops    []Intent
	Time   int64 // the commit's `time`: the holder's wall clock, unix ms
	// Format is the commit's format (a genesis's Version); 0 means version 1. Step
	// is a stateful format's check against its state (nil for version 1).
	Format uint64
	Step   FormatStep
}

// CommitVerifier decodes a commit's full encoding, checks that it is canonical and that
// its signature verifies under the key named by the commit's own chain field, and
// returns its fields (Chain included). It does not decide which chain is the right
// one: the apply compares Chain with the chain DID in the replicated state (the
// genesis's), so a device's configuration never decides what the log accepts. It must
// be deterministic (same bytes in, same answer out) because the apply calls it.
type CommitVerifier func(raw []byte) (CommitInfo, error)

// Genesis is the chain identity stored in the replicated state: the accepted
// GenesisEntry, with the hash of its encoded bytes and its log index. The zero value
// (Index 0) means none.
type Genesis struct {
	Chain     string // the chain key's did:key
	Version   uint64 // commit format version (CommitFormatVersion)
	Nonce     [GenesisNonceLen]byte
	TS        int64  // bootstrapper's wall clock, unix ms
	Retention int64  // dedupe retention as given (ms; 0 = DefaultRetention)
	MaxIDs    uint64 // cap on remembered intent IDs (0 = none)
	// Hash is the genesis hash: SHA-256 of the entry's encoded bytes as they are in
	// the log. Two histories never share one (the nonce).
	Hash  [32]byte
	Index uint64 // Raft index of the genesis entry
}

// Entry is one Raft log entry: exactly one of the kinds below. Encode and Decode (in
// codec.go) turn an Entry into versioned bytes and back.
type Entry interface{ isEntry() }

// The unexported v1 fields below mark an entry decoded from codec version 1 (an entry
// an older build wrote). The apply keeps that version's rules for it, because
// determinism is per entry bytes: a log replays the same whatever build replays it.
// Entries built in code never have them set, and Encode writes version 4. The ver
// fields likewise mark an entry decoded from sealed codec version 2 or 3, whose log
// time rule it keeps: version 2 the largest timestamp, unbounded; version 3 bounded
// steps measured from the last stamp, whoever wrote it; version 4 bounded steps
// between one writer's stamps (apply.go, advance).

// IntentsEntry carries one or many intents (group commit: concurrent submissions may
// share an entry). Each intent is accepted or rejected on its own.
type IntentsEntry struct {
	Intents []Intent

	v1  bool // validated by the version-1 rules (no control-character or dot-segment checks)
	ver byte // the sealed version it was decoded from (2 or 3; re-encodes as it), 0: built here
}

// ClaimEntry claims the lease at Epoch = stored epoch + 1 if PrevRev equals the stored
// lease record's revision (Lease.Rev): compare-and-set on the whole record, so a
// renewal applied after the claimant read the record makes the claim lose
// (ReasonStaleRev). Force marks an operator's steal (same rule); Reason is then
// required.
type ClaimEntry struct {
	Holder  string
	Epoch   uint64
	PrevRev uint64 // Rev of the record the claim was decided on
	TS      int64  // unix ms
	TTL     int64  // ms
	Force   bool
	Reason  string
	// Nonce identifies the claiming process (election picks a random nonzero one per
	// process); the record keeps it (Lease.Nonce). Encoded after Reason, only when
	// set (nonzero), so that a claim without one keeps its bytes; 0: none.
	Nonce uint64

	// A version-1 claim carried PrevEpoch instead of PrevRev and was accepted iff
	// PrevEpoch == stored epoch and Epoch == PrevEpoch+1.
	v1        bool
	prevEpoch uint64
	ver       byte // decoded from version 2 or 3: moves log time by that version's rule
}

// RenewEntry refreshes the holder's lease timestamp. Accepted iff the stored holder and
// epoch equal the entry's (else ReasonNotHolder, ReasonEpochMismatch) and PrevRev is
// the stored Rev (else ReasonStaleRev: the holder's view is behind, not its lease).
type RenewEntry struct {
	Holder  string
	Epoch   uint64
	PrevRev uint64
	TS      int64

	v1  bool // version 1: no PrevRev, holder and epoch only
	ver byte // decoded from version 2 or 3: moves log time by that version's rule
}

// ReleaseEntry gives the lease up; the epoch is kept. Same checks as RenewEntry.
type ReleaseEntry struct {
	Holder  string
	Epoch   uint64
	PrevRev uint64

	v1  bool
	ver byte
}

// TransferEntry hands the lease to a named member at Epoch+1 in one entry. Same checks
// as RenewEntry, and To must be a member.
type TransferEntry struct {
	Holder  string
	Epoch   uint64
	PrevRev uint64
	To      string
	TS      int64

	v1  bool
	ver byte
}

// GenesisEntry fixes the chain's identity in the replicated state. Accepted once: when
// no genesis is stored and, if commits were already applied (a legacy log without
// one), Chain is the DID those commits carry. The node proposes it when it bootstraps
// a cluster, and on its first start on a log that has none.
type GenesisEntry struct {
	Chain   string // the chain key's did:key
	Version uint64 // commit format version: CommitFormatVersion
	// Nonce is GenesisNonceLen random bytes picked by the bootstrapper, so that every
	// history's genesis (and genesis hash) is unique.
	Nonce []byte
	TS    int64 // bootstrapper's wall clock, unix ms
	// Retention is how long (ms) the dedupe window remembers an intent ID at least, in
	// log time; 0 means DefaultRetention.
	Retention int64
	// MaxIDs caps the remembered intent IDs (the operator's size budget); 0 means no
	// cap. New intents get ReasonBacklog rather than evict an ID within the retention.
	MaxIDs uint64
	// Repo names the chain's state when the bootstrapper gave it a name of its own: an
	// atproto repository's DID (did:plc:...), which its first commit must then carry.
	// Empty: the format's default (atproto: the chain key's did:key). The chain
	// format's genesis rule (RegisterGenesisRule) checks it and gives the format state
	// the chain starts from; a genesis naming one on a format without a rule is
	// refused (ReasonBadEntry). Encoded only when set, after MaxIDs, so that a genesis
	// without one keeps its bytes (and its hash).
	Repo string

	ver byte
}

// CommitEntry carries a signed commit's full encoding (format owned by package signer).
type CommitEntry struct {
	Raw []byte

	v1  bool
	ver byte
}

func (IntentsEntry) isEntry()  {}
func (ClaimEntry) isEntry()    {}
func (RenewEntry) isEntry()    {}
func (ReleaseEntry) isEntry()  {}
func (TransferEntry) isEntry() {}
func (CommitEntry) isEntry()   {}
func (GenesisEntry) isEntry()  {}

// Reason is a stable, machine-readable rejection code ("" when accepted).
type Reason string

const (
	ReasonMalformed     Reason = "malformed"      // bytes did not decode
	ReasonBadPath       Reason = "bad_path"       // path invalid or reserved
	ReasonTooLarge      Reason = "too_large"      // id, path or value over its limit
	ReasonBadIntent     Reason = "bad_intent"     // empty id, unknown op, value on del
	ReasonEpochMismatch Reason = "epoch_mismatch" // CAS or holder/epoch check failed on epoch
	ReasonNotHolder     Reason = "not_holder"     // holder does not match the stored one
	ReasonLeaseHeld     Reason = "lease_held"     // (reserved for policy; the apply's CAS decides)
	ReasonNotMember     Reason = "not_member"     // transfer target is not a Raft member
	ReasonBadPrev       Reason = "bad_prev"       // commit prev != head hash
	ReasonBadSeq        Reason = "bad_seq"        // commit seq != head seq + 1
	ReasonBadOps        Reason = "bad_ops"        // commit ops: a pending op that differs, an invalid or repeated carried op, no ops
	ReasonBadSignature  Reason = "bad_signature"  // verifier refused the commit
	ReasonNoReason      Reason = "missing_reason" // forced claim without a reason
	ReasonBadEntry      Reason = "bad_entry"      // fields out of range (e.g. ttl <= 0)
	ReasonBacklog       Reason = "backlog"        // pending queue full (MaxPending) or dedupe window at its MaxIDs cap: retry later
	ReasonStaleRev      Reason = "stale_rev"      // lease write's PrevRev != stored lease revision (the record changed since it was read)
	ReasonGenesisExists Reason = "genesis_exists" // a genesis is stored already
	ReasonBadChain      Reason = "bad_chain"      // commit (or late genesis) names another chain than the stored one
	ReasonDuplicateOp   Reason = "duplicate_op"   // a commit carries an op whose ID is remembered (pending or signed)
)

// IntentResult is the outcome of one intent in an IntentsEntry. A repeated ID reports
// the original result with Duplicate set.
type IntentResult struct {
	ID        string
	Accepted  bool
	Reason    Reason
	Index     uint64 // Raft index of the entry that first accepted this ID
	Duplicate bool
	Seq       uint64   // seq of the commit that signed it, 0 if not signed (yet)
	Hash      [32]byte // hash of that commit, zero if not signed (yet)
	LogTime   int64    // log time (unix ms) when it was accepted
}

// Result is what applying one entry produced. For an IntentsEntry, Accepted is true when
// at least one intent was accepted and Intents has one element per intent, in order.
// For an accepted CommitEntry, Intents has one element per op of the commit, in op
// order, each with the result the dedupe window now remembers for it: the pending ops'
// original index and log time, the carried ops' the commit's own; Seq and Hash are the
// commit's. That is what the proposer answers each op's submitter with.
type Result struct {
	Index    uint64
	Accepted bool
	Reason   Reason
	Intents  []IntentResult
	Lease    Lease // the lease after the entry
	Head     Head  // the head after the entry
}

// View is a consistent copy of the small, hot part of the locally applied state. Reading
// it never waits on Raft (see Log.View).
type View struct {
	AppliedIndex uint64
	Lease        Lease
	Head         Head
	Pending      int   // intents accepted but not yet signed
	PendingBytes int64 // their total path+value bytes
	// Chain is the chain DID commits must carry: the genesis's, or in a legacy log
	// without one the DID of the first accepted commit; "" before either.
	Chain   string
	Genesis Genesis // zero (Index 0) until a genesis is applied
	// LogTime is the replicated clock the dedupe window is measured in (unix ms),
	// moved by the accepted entries that carry a timestamp (genesis, claim, renew,
	// transfer, commit time): by at most one bounded step per entry (see
	// applier.advance), so it may lag the wall clocks but a clock running ahead moves
	// it by one step at most. It never decreases.
	LogTime int64
	// TimeClamped counts the entries whose timestamp was further ahead of the previous
	// one than one step allows: a writer's clock ran ahead, or the chain sat idle.
	TimeClamped uint64
	// Remembered is how many intent IDs the dedupe window holds (pending included).
	Remembered int
}

// LeaseEvent is one line of the lease history (the audit trail).
type LeaseEvent struct {
	Index  uint64 // Raft index of the entry
	Event  string // "claim", "steal", "renew", "release", "transfer"
	Holder string // holder after the event ("" after release)
	Epoch  uint64
	TS     int64
	Prior  string // for steal and transfer: the holder before
	Reason string // for steal
}
