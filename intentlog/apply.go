package intentlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/internal/knobs"
)

// applier applies a batch of Raft log entries inside one bbolt write transaction. It
// reads nothing but the entries and the transaction: no clock, no randomness, no map
// iteration (the rejection deltas are a map but are only written key by key).
type applier struct {
	tx                      *bolt.Tx
	verify                  CommitVerifier
	knobs                   knobs.Intentlog
	histMax                 uint64
	maxPend                 uint64 // MaxPending (tests lower it)
	digestEvery, digestKeep uint64 // DigestEvery, DigestKeep (tests lower them)
	budget                  int    // dedupe evictions left for the current entry (evictPerEntry)
	m                       metaState
	out                     []any             // results, one per entry of the batch
	pos                     int               // position in the batch of the entry being applied
	cur                     uint64            // its Raft index
	rej                     map[Reason]uint64 // rejection counts after this batch (copy of the stored ones)
	rejDirty                bool
	events                  []Event
	changed                 bool
	bounded                 bool // the entry being applied is version 3 or 4: its log time step is bounded
	byWriter                bool // it is version 4: steps are measured between one writer's stamps
}

func (a *applier) apply(l *raft.Log) any {
	a.cur = l.Index
	if l.Index <= a.m.Applied {
		// Already applied before a restart (the bbolt state is durable and may be ahead
		// of Raft's idea of what was applied): never apply twice.
		if l.Type != raft.LogCommand {
			return nil
		}
		return Result{Index: l.Index, Reason: "", Lease: a.m.Lease, Head: a.m.Head}
	}
	a.m.Applied = l.Index
	switch l.Type {
	case raft.LogConfiguration:
		a.storeConfiguration(l.Index, raft.DecodeConfiguration(l.Data))
		a.digest(l, true, "", false)
		return nil
	case raft.LogCommand:
	default:
		return nil
	}
	e, err := Decode(l.Data)
	if errors.Is(err, ErrCorrupt) {
		// Not the proposer's mistake: this replica's copy changed after it was
		// written. The others' copies are most likely fine: rejecting it here would
		// diverge from them, applying is impossible. Halt.
		a.halt(&FaultError{File: RaftFile, Index: l.Index, Key: "logs/" + strconv.FormatUint(l.Index, 10), Halted: true, Err: err})
	}
	if err != nil {
		res := a.reject(l.Index, ReasonMalformed)
		a.digest(l, false, res.Reason, false)
		return res
	}
	a.budget = evictPerEntry
	a.bounded = (l.Data[0] == CodecVersion || l.Data[0] == CodecVersionV3) && !a.knobs.UnboundedLogTime
	a.byWriter = a.bounded && l.Data[0] == CodecVersion && !a.knobs.SharedStamp
	res := a.command(l, e)
	if res.Accepted {
		// Only after an accepted entry: a rejected one changes nothing but its counter
		// (and the applied index and the digest).
		a.evictExpired()
	}
	a.digest(l, res.Accepted, res.Reason, !isV1(e))
	return res
}

func (a *applier) command(l *raft.Log, e Entry) Result {
	switch e := e.(type) {
	case IntentsEntry:
		return a.intents(l.Index, e)
	case ClaimEntry:
		return a.claim(l.Index, e)
	case RenewEntry:
		return a.renew(l.Index, e)
	case ReleaseEntry:
		return a.release(l.Index, e)
	case TransferEntry:
		return a.transfer(l.Index, e)
	case CommitEntry:
		return a.commit(l.Index, e)
	case GenesisEntry:
		return a.genesis(l.Index, e, l.Data)
	}
	return a.reject(l.Index, ReasonMalformed)
}

// halt stops the batch at the current entry (see applyAbort): the transaction is rolled
// back and the entries before this one are applied again without it.
func (a *applier) halt(fe *FaultError) { panic(applyAbort{fault: fe}) }

func (a *applier) result(idx uint64) Result {
	return Result{Index: idx, Accepted: true, Lease: a.m.Lease, Head: a.m.Head}
}

func (a *applier) countReject(r Reason) {
	a.rej[r]++
	a.rejDirty = true
	a.changed = true
	a.put(bRejections, []byte(r), u64key(a.rej[r]))
}

func (a *applier) reject(idx uint64, r Reason) Result {
	a.countReject(r)
	return Result{Index: idx, Reason: r, Lease: a.m.Lease, Head: a.m.Head}
}

// must stops the batch if a write into the transaction failed. bbolt's in-memory
// writes fail only for a damaged or misused bucket (never for I/O, which happens at
// commit): a halt, not a crash.
func must(err error) {
	if err != nil {
		panic(applyAbort{fault: &FaultError{File: StateFile, Key: "(write)", Halted: true,
			Err: fmt.Errorf("%w: write into the state transaction failed: %v", ErrCorrupt, err)}})
	}
}

// corrupt halts the batch: the stored value at bucket/key does not decode, or the
// stored state contradicts itself. The state file cannot be trusted: halt (a
// FaultError naming state.db and the key), never repair.
func (a *applier) corrupt(bucket, key []byte, format string, args ...any) {
	a.halt(&FaultError{File: StateFile, Index: a.cur, Key: keyName(bucket, key), Halted: true,
		Err: fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))})
}

func (a *applier) writeFailed(bucket, key []byte, err error) {
	a.halt(&FaultError{File: StateFile, Index: a.cur, Key: keyName(bucket, key), Halted: true,
		Err: fmt.Errorf("%w: write into the state transaction failed: %v", ErrCorrupt, err)})
}

// get returns the verified payload at bucket/key (nil when absent); a value that does
// not verify halts.
func (a *applier) get(bucket, key []byte) []byte {
	v := a.tx.Bucket(bucket).Get(key)
	if v == nil {
		return nil
	}
	return a.open(bucket, key, v)
}

// open verifies a stored value read through a cursor.
func (a *applier) open(bucket, key, stored []byte) []byte {
	p, err := openStored(bucket, key, stored)
	if err != nil {
		a.corrupt(bucket, key, "%v", err)
	}
	return p
}

// put stores payload sealed at bucket/key.
func (a *applier) put(bucket, key, payload []byte) {
	if err := a.bucket(bucket).Put(key, seal(bucket, key, payload)); err != nil {
		a.writeFailed(bucket, key, err)
	}
}

// readMeta loads the meta state of the transaction; a broken one halts.
func (a *applier) readMeta() metaState {
	m, err := readMeta(a.tx)
	if err != nil {
		a.corrupt(bMeta, keyState, "%v", err)
	}
	return m
}

// --- intents ---

func (a *applier) intents(idx uint64, e IntentsEntry) Result {
	if len(e.Intents) == 0 {
		return a.reject(idx, ReasonBadEntry)
	}
	res := Result{Index: idx, Intents: make([]IntentResult, 0, len(e.Intents))}
	for _, in := range e.Intents {
		ir := IntentResult{ID: in.ID}
		if r := a.validIntent(in, e.v1); r != "" {
			ir.Reason = r
			a.countReject(r)
		} else if d, ok := a.dedupeGet(in.ID); ok {
			ir = d.result(in.ID)
			ir.Duplicate = true
		} else if r := a.admit(e.v1); r != "" {
			ir.Reason = r
			a.countReject(r)
		} else {
			if in.Op == OpDel {
				in.Value = nil
			}
			a.pendingPush(in)
			d := a.dedupePut(in.ID, idx, e.v1)
			ir = d.result(in.ID)
			a.events = append(a.events, IntentAccepted{ID: in.ID, Index: idx})
			a.changed = true
		}
		if ir.Accepted {
			res.Accepted = true
		} else if res.Reason == "" {
			res.Reason = ir.Reason
		}
		res.Intents = append(res.Intents, ir)
	}
	if res.Accepted {
		res.Reason = ""
	}
	res.Lease, res.Head = a.m.Lease, a.m.Head
	return res
}

// admit decides whether one more intent may be queued and remembered: "" or
// ReasonBacklog (retryable: the client tries again once the chain moves or time
// passes).
func (a *applier) admit(v1 bool) Reason {
	if v1 {
		// Version 1's rule: at most legacyDedupeWindow pending, so that no pending ID
		// left its count window.
		if a.m.PendCount >= legacyDedupeWindow {
			return ReasonBacklog
		}
		return ""
	}
	if a.m.PendCount >= a.maxPend {
		return ReasonBacklog
	}
	if max := a.m.Genesis.MaxIDs; max > 0 && a.m.DedupeCount >= max {
		// At the operator's cap: make room only by forgetting an ID that may be
		// forgotten (signed and older than the retention), never a younger one. Only
		// when that makes room, so that a refused intent changes nothing.
		if a.m.DedupeCount == max {
			a.evictExpiredN(1)
		}
		if a.m.DedupeCount >= max {
			return ReasonBacklog
		}
	}
	return ""
}

// validIntent returns why in is refused ("" if valid): ValidateIntent's rule, or for
// a version-1 entry the rule that version's apply had.
func (a *applier) validIntent(in Intent, v1 bool) Reason {
	if v1 {
		return validateIntentV1(in)
	}
	if e := validateIntent(in); e != nil {
		return e.Reason
	}
	return a.formatIntent(in) // format.go
}

func (a *applier) pendingPush(in Intent) {
	a.put(bPending, u64key(a.m.PendNext), encodeIntentValue(in))
	a.m.PendNext++
	a.m.PendCount++
	a.m.PendBytes += uint64(len(in.Path) + len(in.Value))
}

// --- the dedupe window ---
//
// Every accepted intent ID is remembered with its result (dedupeEntry) in bDedupe, and
// its insertion order in bDedupeOrder. Insertion order is log-time order (log time
// never decreases), so eviction looks only at the oldest: it stops at the first ID
// that is still pending (never forget an unsigned ID: its retry must find it) or
// younger than the retention. Eviction runs after every accepted entry, at most
// evictPerEntry IDs each time, so a big jump in log time never makes one huge
// transaction.

// retention is the dedupe retention in ms.
func (a *applier) retention() int64 {
	if r := a.m.Genesis.Retention; r > 0 {
		return r
	}
	return DefaultRetention
}

// advance moves log time for an accepted entry that carries the timestamp ts. Only
// version-2 and version-3 entries call it: version-1 entries did not keep log time, and
// a converted old snapshot must equal its replayed log.
//
// A version-2 entry (an older build's) keeps its rule on replay: log time becomes ts if
// ts is later, however far ahead. That let one claim from a clock two hours fast make
// the dedupe window forget every ID (issue 19).
//
// A version-3 entry moves log time by the difference between ts and the timestamp of
// the previous such entry (LastStamp; before the first one, log time itself), clamped
// to [0, maxLogTimeStep]. A clock that steps ahead, or a holder whose clock runs ahead
// of the last one's, moves log time by at most one step, once; a clock behind (or
// stepping back) moves it by nothing, once; otherwise log time advances at the pace of
// the writers' clocks. An idle gap longer than one step is counted as one step: log
// time then lags the wall clocks, which lengthens the retention of the IDs remembered
// before the gap and shortens nothing. Each step cut short counts in TimeClamped.
//
// But every handover from a holder whose clock is behind to one whose clock is ahead
// is such a step: handovers back and forth between two devices minutes apart moved
// log time a step each time, and sixteen of them within the retention made the dedupe
// window forget acknowledged IDs (issue 19.2; the simulator's profile flapping). A
// version-4 entry therefore measures its step from the last stamp only when the same
// writer (the holder that stamped it) wrote that stamp (StampBy); a stamp by another
// writer moves nothing and starts that writer's baseline. The time between the last
// writer's last stamp and the next writer's first is not counted (log time lags:
// retention lengthens). Within one writer, a step is measured from its highest stamp
// so far: one holder's stamps come from two sources (a commit's time is its wall
// clock, a renewal's at least the record's ts + 1), which after its clock stepped back
// alternate between behind and ahead, and each renewal after a commit was a step
// ahead (the simulator's seed 7 of flapping). A holder whose clock stepped back then
// moves log time by nothing until its clock passes its own last stamp or the lease
// changes hands (retention lengthens; with MaxIDs, intents may answer backlog
// meanwhile). What a clock error costs is at most one step for each forward step of
// one device's clock, whatever the handovers. writer is "" for the genesis.
func (a *applier) advance(ts int64, writer string) {
	if !a.byWriter {
		writer = "" // a version-3 entry's writer is not kept: the next version-4 stamp is a new writer's
	}
	if !a.bounded || a.m.LogTime <= 0 {
		if ts <= a.m.LogTime {
			return
		}
		if a.m.TimeOrigin == 0 {
			// IDs remembered before log time started (log time 0: a legacy log) count
			// from here.
			a.m.TimeOrigin = ts
		}
		a.m.LogTime = ts
		if a.bounded {
			a.m.LastStamp, a.m.StampBy = ts, writer
		}
		return
	}
	prev := a.m.LastStamp
	if prev == 0 {
		prev = a.m.LogTime
	}
	switch {
	case !a.byWriter:
		a.m.LastStamp, a.m.StampBy = ts, writer
	case a.m.StampBy != writer:
		a.m.LastStamp, a.m.StampBy = ts, writer // a new writer's baseline
		return
	case ts <= prev:
		return // behind the writer's own high-water stamp
	default:
		a.m.LastStamp = ts
	}
	step, limit := ts-prev, a.maxLogTimeStep()
	if step <= 0 {
		return
	}
	if step > limit {
		step = limit
		a.m.TimeClamped++
	}
	a.m.LogTime += step
}

// maxLogTimeStep is the most one version-3 entry moves log time (ms): a sixteenth of
// the retention (so that a clock error costs at most that much of any ID's retention),
// but never less than the record's TTL (a live holder writes at least once per TTL, so
// its steps are never cut) nor a second.
func (a *applier) maxLogTimeStep() int64 {
	return max(a.retention()/StepsPerRetention, a.m.Lease.TTL, 1000)
}

func (a *applier) dedupeGet(id string) (dedupeEntry, bool) {
	v := a.get(bDedupe, []byte(id))
	if v == nil {
		return dedupeEntry{}, false
	}
	d, err := decodeDedupe(v)
	if err != nil {
		a.corrupt(bDedupe, []byte(id), "%v", err)
	}
	return d, true
}

// dedupePut remembers id as accepted by the entry at idx, now (log time).
func (a *applier) dedupePut(id string, idx uint64, v1 bool) dedupeEntry {
	d := dedupeEntry{Order: a.m.DedupeNext, Index: idx, LogTime: a.m.LogTime}
	a.dedupeStore(id, d)
	switch {
	case v1:
		// Version 1's count window: the oldest go once more than legacyDedupeWindow
		// are remembered (bounded like any eviction; a version-1 log never holds more).
		for n := 0; a.m.DedupeCount > legacyDedupeWindow && n < evictPerEntry; n++ {
			a.evictOldest()
		}
	case a.knobs.DedupeCount > 0:
		for a.m.DedupeCount > uint64(a.knobs.DedupeCount) {
			a.evictOldest()
		}
	}
	return d
}

func (a *applier) dedupeStore(id string, d dedupeEntry) {
	a.put(bDedupe, []byte(id), d.encode())
	a.put(bDedupeOrder, u64key(d.Order), []byte(id))
	a.m.DedupeNext++
	a.m.DedupeCount++
}

// evictExpired forgets the oldest IDs that may be forgotten, within the entry's budget.
func (a *applier) evictExpired() { a.evictExpiredN(a.budget) }

func (a *applier) evictExpiredN(n int) {
	if a.knobs.DedupeCount > 0 || a.m.LogTime <= 0 {
		return // the knob's count window replaces this; no log time, no age
	}
	keep := a.retention()
	order := a.bucket(bDedupeOrder)
	for ; n > 0 && a.budget > 0; n-- {
		k, v := order.Cursor().First()
		if k == nil {
			return
		}
		id := a.open(bDedupeOrder, k, v)
		d, ok := a.dedupeGet(string(id))
		if !ok {
			a.corrupt(bDedupeOrder, k, "names %q, which is not remembered", id)
		}
		if d.Seq == 0 || a.m.LogTime-max(d.LogTime, a.m.TimeOrigin) <= keep {
			return // pending, or within the retention: so is everything after it
		}
		a.evictOldest()
	}
}

// expirable counts, without changing anything, how many of the oldest n remembered IDs
// evictExpiredN would forget.
func (a *applier) expirable(n int) int {
	if a.knobs.DedupeCount > 0 || a.m.LogTime <= 0 {
		return 0
	}
	keep := a.retention()
	c := a.tx.Bucket(bDedupeOrder).Cursor()
	got := 0
	for k, v := c.First(); k != nil && got < n; k, v = c.Next() {
		d, ok := a.dedupeGet(string(a.open(bDedupeOrder, k, v)))
		if !ok || d.Seq == 0 || a.m.LogTime-max(d.LogTime, a.m.TimeOrigin) <= keep {
			break
		}
		got++
	}
	return got
}

// evictOldest forgets the oldest remembered ID, whatever its state.
func (a *applier) evictOldest() {
	c := a.bucket(bDedupeOrder).Cursor()
	k, v := c.First()
	if k == nil {
		a.corrupt(bMeta, keyState, "dedupe count %d exceeds the dedupe order bucket", a.m.DedupeCount)
	}
	must(a.tx.Bucket(bDedupe).Delete(a.open(bDedupeOrder, k, v)))
	must(c.Delete())
	a.m.DedupeCount--
	a.budget--
}

// bucket returns a bucket of the transaction; the append-mostly ones (sequential keys)
// are filled to the brim instead of half, which halves their size on disk.
func (a *applier) bucket(name []byte) *bolt.Bucket {
	b := a.tx.Bucket(name)
	switch string(name) {
	case string(bDedupeOrder), string(bPending), string(bChain), string(bHistory):
		b.FillPercent = 1.0
	}
	return b
}

// --- lease ---

// history records an accepted lease entry: the record's revision becomes the entry's
// index, and the event goes into the bounded lease history.
func (a *applier) history(ev LeaseEvent) {
	a.m.Lease.Rev = ev.Index
	w := &wbuf{}
	encodeLeaseEvent(w, ev)
	h := a.bucket(bHistory)
	a.put(bHistory, u64key(a.m.HistNext), w.b)
	a.m.HistNext++
	a.m.HistCount++
	for a.m.HistCount > a.histMax {
		c := h.Cursor()
		if k, _ := c.First(); k == nil {
			a.corrupt(bMeta, keyState, "history count %d exceeds the history bucket", a.m.HistCount)
		}
		must(c.Delete())
		a.m.HistCount--
	}
	a.events = append(a.events, LeaseChanged{Index: ev.Index, Event: ev.Event, Lease: a.m.Lease})
	a.changed = true
}

func (a *applier) claim(idx uint64, e ClaimEntry) Result {
	if r := validHolder(e.Holder); r != "" {
		return a.reject(idx, r)
	}
	switch {
	case e.TTL <= 0:
		return a.reject(idx, ReasonBadEntry)
	case len(e.Reason) > MaxReasonLen:
		return a.reject(idx, ReasonTooLarge)
	case e.Force && e.Reason == "":
		return a.reject(idx, ReasonNoReason)
	}
	if r := a.claimCAS(e); r != "" {
		return a.reject(idx, r)
	}
	prior := a.m.Lease.Holder
	a.m.Lease = Lease{Holder: e.Holder, Epoch: e.Epoch, TS: e.TS, TTL: e.TTL, Nonce: e.Nonce}
	if !e.v1 {
		a.advance(e.TS, e.Holder)
	}
	ev := LeaseEvent{Index: idx, Event: "claim", Holder: e.Holder, Epoch: e.Epoch, TS: e.TS}
	if e.Force {
		ev.Event, ev.Prior, ev.Reason = "steal", prior, e.Reason
	}
	a.history(ev)
	return a.result(idx)
}

// claimCAS is a claim's compare-and-set: "" when it wins.
func (a *applier) claimCAS(e ClaimEntry) Reason {
	l := a.m.Lease
	next := l.Epoch + 1 // 0 when the epoch space is exhausted: no claim can match
	switch {
	case e.v1:
		// Version 1 compared the epoch only, and its entries keep that rule on replay.
		if e.prevEpoch != l.Epoch || e.Epoch != e.prevEpoch+1 || e.Epoch == 0 {
			return ReasonEpochMismatch
		}
	case a.knobs.EpochOnlyClaim:
		if next == 0 || e.Epoch != next {
			return ReasonEpochMismatch
		}
	default:
		// The revision first: a claim decided on an older record (a renewal, or any
		// other lease write, landed since the claimant read it) loses whatever its
		// epoch says.
		if e.PrevRev != l.Rev {
			return ReasonStaleRev
		}
		if next == 0 || e.Epoch != next {
			return ReasonEpochMismatch
		}
	}
	return ""
}

// checkHolder is the check shared by renew, release and transfer: the stored holder and
// epoch are the entry's, and (for a version-2 entry) the record is the revision the
// holder decided on.
func (a *applier) checkHolder(holder string, epoch, prevRev uint64, v1 bool) Reason {
	if r := validHolder(holder); r != "" {
		return r
	}
	if a.m.Lease.Holder == "" || a.m.Lease.Holder != holder {
		return ReasonNotHolder
	}
	if a.m.Lease.Epoch != epoch {
		return ReasonEpochMismatch
	}
	if !v1 && prevRev != a.m.Lease.Rev {
		return ReasonStaleRev
	}
	return ""
}

func (a *applier) renew(idx uint64, e RenewEntry) Result {
	if r := a.checkHolder(e.Holder, e.Epoch, e.PrevRev, e.v1); r != "" {
		return a.reject(idx, r)
	}
	a.m.Lease.TS = e.TS
	if !e.v1 {
		a.advance(e.TS, e.Holder)
	}
	a.history(LeaseEvent{Index: idx, Event: "renew", Holder: e.Holder, Epoch: e.Epoch, TS: e.TS})
	return a.result(idx)
}

func (a *applier) release(idx uint64, e ReleaseEntry) Result {
	if r := a.checkHolder(e.Holder, e.Epoch, e.PrevRev, e.v1); r != "" {
		return a.reject(idx, r)
	}
	a.m.Lease.Holder, a.m.Lease.Nonce = "", 0
	a.history(LeaseEvent{Index: idx, Event: "release", Epoch: e.Epoch, TS: a.m.Lease.TS, Prior: e.Holder})
	return a.result(idx)
}

func (a *applier) transfer(idx uint64, e TransferEntry) Result {
	if r := a.checkHolder(e.Holder, e.Epoch, e.PrevRev, e.v1); r != "" {
		return a.reject(idx, r)
	}
	if r := validHolder(e.To); r != "" {
		return a.reject(idx, r)
	}
	if a.get(bMembers, []byte(e.To)) == nil {
		return a.reject(idx, ReasonNotMember)
	}
	if a.m.Lease.Epoch == ^uint64(0) {
		return a.reject(idx, ReasonBadEntry)
	}
	a.m.Lease = Lease{Holder: e.To, Epoch: e.Epoch + 1, TS: e.TS, TTL: a.m.Lease.TTL}
	if !e.v1 {
		a.advance(e.TS, e.Holder)
	}
	a.history(LeaseEvent{Index: idx, Event: "transfer", Holder: e.To, Epoch: e.Epoch + 1,
		TS: e.TS, Prior: e.Holder})
	return a.result(idx)
}

// --- commit ---

func (a *applier) commit(idx uint64, e CommitEntry) Result {
	info, ok := a.verifyCommit(e.Raw)
	if !ok || info.Chain == "" {
		return a.reject(idx, ReasonBadSignature)
	}
	if a.m.Chain != "" && info.Chain != a.m.Chain {
		if e.v1 {
			// Version-1 applies verified under the configured chain key and refused
			// another chain's commit as a bad signature: keep that on replay.
			return a.reject(idx, ReasonBadSignature)
		}
		return a.reject(idx, ReasonBadChain)
	}
	l, h := a.m.Lease, a.m.Head
	switch {
	case l.Holder == "" || info.Signer != l.Holder:
		return a.reject(idx, ReasonNotHolder)
	case info.Epoch != l.Epoch:
		return a.reject(idx, ReasonEpochMismatch)
	case h.Seq == 0 && info.Prev != nil:
		return a.reject(idx, ReasonBadPrev)
	case h.Seq > 0 && !bytes.Equal(info.Prev, h.Hash[:]):
		return a.reject(idx, ReasonBadPrev)
	case info.Seq != h.Seq+1:
		return a.reject(idx, ReasonBadSeq)
	case len(info.Ops) == 0:
		return a.reject(idx, ReasonBadOps)
	}
	fu, r := a.formatCheck(info) // the chain's format; a stateful format's own checks (format.go)
	if r != "" {
		return a.reject(idx, r)
	}
	// Check the ops before changing anything: first the oldest pending intents, then
	// the ops the commit carries itself.
	npend, r := a.matchPending(info.Ops, e.v1)
	if r != "" {
		return a.reject(idx, r)
	}
	carried := info.Ops[npend:]
	if r := a.checkCarried(carried); r != "" {
		return a.reject(idx, r)
	}

	// Accepted: dequeue, update records and dedupe, extend the chain.
	seq, hash := info.Seq, sha256.Sum256(e.Raw)
	if !e.v1 {
		a.advance(info.Time, info.Signer)
	}
	res := a.result(idx)
	res.Intents = make([]IntentResult, 0, len(info.Ops))
	pend := a.bucket(bPending)
	recs := a.tx.Bucket(bRecords)
	for i, op := range info.Ops {
		var d dedupeEntry
		if i < npend {
			c := pend.Cursor()
			c.First()
			must(c.Delete())
			a.m.PendCount--
			a.m.PendBytes -= uint64(len(op.Path) + len(op.Value))
			var ok bool
			if d, ok = a.dedupeGet(op.ID); ok && d.Index > 0 {
				d.Seq, d.Hash = seq, hash
				a.put(bDedupe, []byte(op.ID), d.encode())
			} else {
				// Forgotten while pending: only the DedupeCount knob does that.
				d = dedupeEntry{Seq: seq, Hash: hash}
			}
		} else {
			d = dedupeEntry{Order: a.m.DedupeNext, Index: idx, LogTime: a.m.LogTime, Seq: seq, Hash: hash}
			a.dedupeStore(op.ID, d)
		}
		switch op.Op {
		case OpPut:
			a.put(bRecords, []byte(op.Path), op.Value)
		case OpDel:
			must(recs.Delete([]byte(op.Path)))
		}
		res.Intents = append(res.Intents, d.result(op.ID))
	}
	if a.knobs.DedupeCount > 0 {
		// The knob's count window bounds the carried ops too (they enter the window
		// here, not through dedupePut): the old window forgot whatever came in.
		for a.m.DedupeCount > uint64(a.knobs.DedupeCount) {
			a.evictOldest()
		}
	}
	a.formatWrite(fu)
	must(a.bucket(bChain).Put(u64key(seq), sealChain(e.Raw)))
	a.m.Head = Head{Seq: seq, Hash: hash, Epoch: info.Epoch, Signer: info.Signer}
	if a.m.Chain == "" {
		// A legacy log without a genesis: the first accepted commit fixes the chain.
		a.m.Chain = info.Chain
	}
	a.events = append(a.events, CommitApplied{Index: idx, Head: a.m.Head, Raw: e.Raw, Ops: info.Ops})
	a.changed = true
	res.Head = a.m.Head
	return res
}

// matchPending returns how many of ops, from the first, are the oldest pending intents
// in queue order. An op whose ID is the next pending intent's must equal it exactly
// (else bad_ops); the first op that does not name the next pending intent ends the
// prefix. A version-1 commit had no carried ops: all its ops must match.
func (a *applier) matchPending(ops []Intent, v1 bool) (int, Reason) {
	if v1 && uint64(len(ops)) > a.m.PendCount {
		return 0, ReasonBadOps
	}
	c := a.tx.Bucket(bPending).Cursor()
	k, v := c.First()
	n := 0
	for ; n < len(ops) && k != nil; n++ {
		in, err := decodeIntentValue(a.open(bPending, k, v))
		if err != nil {
			a.corrupt(bPending, k, "%v", err)
		}
		op := ops[n]
		if op.ID != in.ID {
			break
		}
		if op.Op != in.Op || op.Path != in.Path || !bytes.Equal(op.Value, in.Value) {
			return 0, ReasonBadOps
		}
		k, v = c.Next()
	}
	if v1 && n != len(ops) {
		return 0, ReasonBadOps
	}
	return n, ""
}

// checkCarried checks the ops a commit carries itself: each valid as an intent (else
// bad_ops), its ID not remembered (else duplicate_op: pending IDs are remembered too)
// and not repeated in the commit (else bad_ops); and room for them in the dedupe
// window under the genesis's MaxIDs (else backlog).
func (a *applier) checkCarried(ops []Intent) Reason {
	if len(ops) == 0 {
		return ""
	}
	seen := make(map[string]struct{}, len(ops)) // lookups only: never iterated
	for _, op := range ops {
		if validateIntent(op) != nil {
			return ReasonBadOps
		}
		if _, ok := a.dedupeGet(op.ID); ok {
			return ReasonDuplicateOp
		}
		if _, dup := seen[op.ID]; dup {
			return ReasonBadOps
		}
		seen[op.ID] = struct{}{}
	}
	if max := a.m.Genesis.MaxIDs; max > 0 && a.m.DedupeCount+uint64(len(ops)) > max {
		need := a.m.DedupeCount + uint64(len(ops)) - max
		if need > uint64(a.budget) || a.expirable(int(need)) < int(need) {
			return ReasonBacklog
		}
		a.evictExpiredN(int(need))
	}
	return ""
}

// --- genesis ---

func (a *applier) genesis(idx uint64, e GenesisEntry, data []byte) Result {
	if a.m.Genesis.Index != 0 {
		return a.reject(idx, ReasonGenesisExists)
	}
	if r := validChain(e.Chain); r != "" {
		return a.reject(idx, r)
	}
	switch {
	case !knownFormat(e.Version), len(e.Nonce) != GenesisNonceLen, e.Retention < 0:
		return a.reject(idx, ReasonBadEntry)
	case a.m.Chain != "" && e.Chain != a.m.Chain:
		// A late genesis for a legacy chain must name the chain its commits carry.
		return a.reject(idx, ReasonBadChain)
	}
	head, r := a.genesisHead(e)
	if r != "" {
		return a.reject(idx, r)
	}
	g := Genesis{Chain: e.Chain, Version: e.Version, TS: e.TS, Retention: e.Retention,
		MaxIDs: e.MaxIDs, Hash: sha256.Sum256(data), Index: idx}
	copy(g.Nonce[:], e.Nonce)
	a.m.Genesis, a.m.Chain = g, e.Chain
	if head != nil {
		a.formatWrite(&formatUpdate{head: head})
	}
	a.advance(e.TS, "")
	a.events = append(a.events, GenesisApplied{Genesis: g})
	a.changed = true
	return a.result(idx)
}

// verifyCommit calls the verifier; a verifier that panics refuses the commit (the
// verifier is deterministic, so every replica refuses it the same way).
func (a *applier) verifyCommit(raw []byte) (info CommitInfo, ok bool) {
	return verifySafely(a.verify, raw)
}

func verifySafely(verify CommitVerifier, raw []byte) (info CommitInfo, ok bool) {
	if verify == nil {
		return CommitInfo{}, false
	}
	defer func() {
		if recover() != nil {
			info, ok = CommitInfo{}, false
		}
	}()
	info, err := verify(raw)
	return info, err == nil
}

// --- membership ---

func (a *applier) storeConfiguration(idx uint64, cfg raft.Configuration) {
	b := a.tx.Bucket(bMembers)
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.First() {
		must(c.Delete())
	}
	for _, s := range cfg.Servers {
		w := &wbuf{}
		w.byte1(byte(s.Suffrage))
		w.str(string(s.Address))
		a.put(bMembers, []byte(s.ID), w.b)
	}
	a.m.ConfigIndex = idx
	a.changed = true
}
