package election

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
)

// Log is what the Lease needs from the intent log. The node supplies it: a local Raft
// node that proposes locally when it leads and forwards to the leader otherwise.
type Log interface {
	// View returns the locally applied state. It must never block on Raft (a stalled
	// or partitioned replica must not freeze the signer loop): the Lease calls it
	// under its own lock on every read.
	View() intentlog.View
	// Propose appends e to the replicated log and returns the result of applying it.
	// It honours ctx. An error means the outcome is unknown: the entry may still be
	// applied later (the Lease copes with that).
	Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error)
}

// Syncer is an optional capability of a Log: Sync returns once the local replica has
// applied every entry committed before the call (a Raft barrier or read index). Claim
// calls it before claiming a lapsed lease, so that a replica that fell behind (and so
// saw an old record "unchanged") does not take a lease whose holder renewed it in the
// meantime: the apply's CAS compares epochs, and a renewal does not change the epoch.
type Syncer interface {
	Sync(ctx context.Context) error
}

// AppliedWaiter is an optional capability of a Log: WaitApplied returns once the local
// replica's AppliedIndex is at least index, or ctx is done. Without it the Lease polls
// View with a short backoff.
type AppliedWaiter interface {
	WaitApplied(ctx context.Context, index uint64) error
}

// Watcher is an optional capability of a Log (*intentlog.Log has it): Watch returns a
// channel closed after the next applied change. Follow uses it.
type Watcher interface {
	Watch() <-chan struct{}
}

// StoreTimer is an optional capability of a Log: StoredAt returns the reading of the
// Lease's own Clock.Mono at which the local replica first stored log entry index in
// its Raft log, if it remembers one that still belongs to the entry at that index now
// (intentlog.Log.StoredAt, given the node's clock). The Lease counts a record as
// observed from when its entry (the record's Rev) was stored here, not from the later
// apply: an entry that waits for its commit (a leader that died after replicating it)
// would otherwise make standbys count a TTL from the next leader's election (see
// doc.go, rule 2). Safe because the holder counts its hold from before it proposed
// the entry, and no replica can store an entry before it was proposed.
type StoreTimer interface {
	StoredAt(index uint64) (time.Duration, bool)
}

// Options tune a Lease.
type Options struct {
	// TTL of this device's claims. Optional, defaults to DefaultTTL (15 s). Whole
	// milliseconds, at least 1 ms.
	TTL time.Duration
	// SignFraction of the TTL during which the holder may sign after proposing its
	// last successful claim or renewal. Optional, defaults to DefaultSignFraction
	// (2/3). Must be in (1/2, MaxSignFraction].
	SignFraction float64
	// Knobs put fixed bugs back for the simulator (nil: production behaviour).
	Knobs *knobs.Election
}

// Tenure is one hold of the lease by this device: from the moment the claim (or a
// renewal after a lapse of the may-sign window) made this device the holder with an
// open window, until the hold ends. A new hold gets a new Tenure.
type Tenure struct {
	Epoch uint64
	// Done is closed the moment the hold ends: the record changed to another holder
	// or epoch, this device released or transferred it, or the may-sign window closed
	// without a renewal.
	Done <-chan struct{}
	// Context is cancelled at the same moment, with cause ErrLost.
	Context context.Context
}

type tenure struct {
	epoch  uint64
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// write is a lease write this device proposed (claim, steal or renew).
type write struct {
	epoch uint64
	ts    int64
	mono  time.Duration
	wall  time.Time
	ok    bool // accepted (by its Result, or seen applied with its exact ts)
}

// maxWrites bounds the memory of proposed writes; only the current epoch's last few
// matter (a lagging view may still show an older one).
const maxWrites = 16

var (
	closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
	lostCtx    = func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrNotHolder)
		return ctx
	}()
)

// Lease is this device's handle on the `__lease__` record. All methods are safe for
// concurrent use. Reads (Current, Observe, Decide, Holds, IsFree, Epoch, Lost,
// HoldContext, Tenure, Stats) never wait on Raft; writes (Claim, Renew, RenewOrClaim,
// Release, Transfer, Steal) are serialised among themselves and honour ctx.
type Lease struct {
	log   Log
	self  string
	clock Clock
	pol   Policy
	knobs *knobs.Election // Options.Knobs

	wsem  chan struct{} // serialises writes
	nonce uint64        // this process's claims' ClaimEntry.Nonce (newNonce)

	mu        sync.Mutex
	seen      bool
	cur       intentlog.Lease
	firstSeen time.Duration
	prev      intentlog.Lease
	havePrev  bool
	skewNoted bool // SkewSuspicions already counted for cur
	writes    []write
	lastTS    int64 // the largest ts this Lease has proposed (uniqueTSLocked)
	everHeld  bool
	standoff  time.Duration
	yielding  bool   // a release or transfer of yieldEpoch was proposed: do not hold it
	yieldEp   uint64 // the epoch being given up
	ten       *tenure
	stopTimer func() bool
	timerAt   time.Duration
	stats     Stats
}

// New returns a Lease for device self over log. A nil clock means SystemClock(). The
// record is observed once here: the observation guard counts from this moment.
func New(log Log, self string, clock Clock, opts Options) (*Lease, error) {
	if log == nil {
		return nil, fmt.Errorf("%w: nil log", ErrBadOptions)
	}
	if self == "" {
		return nil, fmt.Errorf("%w: empty device id", ErrBadOptions)
	}
	if clock == nil {
		clock = SystemClock()
	}
	p := DefaultPolicy()
	if opts.TTL != 0 {
		p.TTL = opts.TTL
	}
	if opts.SignFraction != 0 {
		p.SignFraction = opts.SignFraction
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	l := &Lease{
		log:   log,
		self:  self,
		clock: clock,
		pol:   p,
		knobs: opts.Knobs,
		wsem:  make(chan struct{}, 1),
		nonce: newNonce(),
		stats: Stats{Rejections: map[intentlog.Reason]uint64{}},
	}
	l.Observe()
	return l, nil
}

// newNonce returns a random nonzero nonce for a Lease's claims. The record names a
// write by (epoch, ts) and the claim's nonce: ts, a millisecond of the wall clock,
// repeats across a restart (a process that restarts within a millisecond, or whose
// clock stepped back), and without the nonce a restarted process whose own claim was
// in flight took a claim of the earlier process, at the same epoch and ts, for its
// own: it held an epoch the earlier process had signed under (issue 38).
func newNonce() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand, Go 1.24 and later)
		if n := binary.BigEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}

// Self returns this device's ID.
func (l *Lease) Self() string { return l.self }

// Policy returns the validated tunables.
func (l *Lease) Policy() Policy { return l.pol }

// Current returns the locally applied record (and observes it).
func (l *Lease) Current() intentlog.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, v := l.refreshLocked()
	return v.Lease
}

// Observe feeds the locally applied record into the observation tracker and updates
// the hold (closing Lost if it ended). Call it every tick and whenever the node
// reports an applied change; every other method observes too.
func (l *Lease) Observe() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshLocked()
}

// Follow observes the record after every applied change until ctx is done, so that
// Lost and HoldContext fire the moment an applied change ends the hold even when
// nobody else calls into the Lease. Run it in its own goroutine; it returns ctx's error,
// or ErrBadOptions at once if the Log does not implement Watcher.
func (l *Lease) Follow(ctx context.Context) error {
	w, ok := l.log.(Watcher)
	if !ok {
		return fmt.Errorf("%w: the log cannot be watched", ErrBadOptions)
	}
	for {
		ch := w.Watch() // before observing, so that no change is missed
		l.Observe()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Decide observes and returns the policy's current decision; Decision.Wake tells a
// loop when to look again.
func (l *Lease) Decide() Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, _ := l.refreshLocked()
	return d
}

// Holds reports whether this device holds the lease and may sign now: the applied
// record names this device at the epoch it wrote, and less than SignFraction*ttl has
// passed since it proposed its last successful claim or renewal. This is the signing
// gate: check it before every commit (and build the commit under Tenure's epoch).
// Holds is not proof that the next commit will be accepted: the apply's fencing
// decides that.
func (l *Lease) Holds() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshLocked()
	return l.ten != nil
}

// Tenure returns the current hold, if any.
func (l *Lease) Tenure() (Tenure, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshLocked()
	if l.ten == nil {
		return Tenure{Done: closedDone, Context: lostCtx}, false
	}
	return Tenure{Epoch: l.ten.epoch, Done: l.ten.done, Context: l.ten.ctx}, true
}

// Epoch returns the epoch of this device's current hold, 0 when it does not hold.
func (l *Lease) Epoch() uint64 {
	t, _ := l.Tenure()
	return t.Epoch
}

// Lost returns a channel closed the moment the current hold ends; when this device
// does not hold the lease it returns an already closed channel. Each hold has its own
// channel: fetch it again after a new claim.
func (l *Lease) Lost() <-chan struct{} {
	t, _ := l.Tenure()
	return t.Done
}

// HoldContext returns a context cancelled (cause ErrLost) the moment the current hold
// ends; when this device does not hold the lease it is already cancelled (cause
// ErrNotHolder).
func (l *Lease) HoldContext() context.Context {
	t, _ := l.Tenure()
	return t.Context
}

// IsFree reports whether the lease is free as far as this device can tell: released
// or never held, or lapsed by the policy's rules.
func (l *Lease) IsFree() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, v := l.refreshLocked()
	if v.Lease.Holder == "" {
		return true
	}
	switch d.Why {
	case WhyLapsed, WhyLapsedSkew, WhyOwnLapsed:
		return true
	}
	return false
}

// Stats returns a copy of the counters.
func (l *Lease) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats.clone()
}

// Claim claims the lease at epoch+1 when it is free by the policy (released, never held,
// lapsed, or an own record to adopt), waits (bounded by ctx) until the local replica
// has applied the claim, and returns the new epoch. If this device already holds the
// lease it returns its epoch. Errors: *HeldError (ErrLeaseHeld) when the lease is live,
// ErrStandoff shortly after this device released it, *RejectedError wrapping
// ErrLostRace when the CAS lost, or the Log's error (outcome unknown: if the claim was
// applied after all, the hold starts once the record shows it).
func (l *Lease) Claim(ctx context.Context) (uint64, error) {
	if err := l.lockWrites(ctx); err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	defer l.unlockWrites()

	l.mu.Lock()
	d, v := l.refreshLocked()
	synced := false
	for {
		if d.Holding() {
			l.mu.Unlock()
			return v.Lease.Epoch, nil
		}
		if d.Action != Claim {
			err := l.notClaimableLocked(d, v.Lease)
			l.mu.Unlock()
			return 0, err
		}
		s, ok := l.log.(Syncer)
		if !ok || synced || (d.Why != WhyLapsed && d.Why != WhyLapsedSkew) {
			break
		}
		// A lapse judged on a lagging replica may be a renewal not yet applied here.
		l.mu.Unlock()
		if err := s.Sync(ctx); err != nil {
			return 0, fmt.Errorf("claim: sync before claiming a lapsed lease: %w", err)
		}
		synced = true
		l.mu.Lock()
		d, v = l.refreshLocked()
	}
	e := l.claimEntryLocked(v.Lease, "")
	l.stats.ClaimsProposed++
	l.mu.Unlock()

	res, err := l.log.Propose(ctx, e)
	return l.finishClaim(ctx, "claim", e, res, err)
}

// Bump claims epoch+1 over this device's own hold, without letting the lease go: a
// compare-and-set on the record it holds, like any claim. The signer calls it after
// one of its commits was refused, so that it never signs a second commit for a (seq,
// epoch) it has signed already, and so that no copy of a commit signed under the old
// epoch can apply any more. Like Claim it waits for the local apply and returns the
// new epoch. ErrNotHolder when this device does not hold the lease (and may sign).
func (l *Lease) Bump(ctx context.Context) (uint64, error) {
	if err := l.lockWrites(ctx); err != nil {
		return 0, fmt.Errorf("bump: %w", err)
	}
	defer l.unlockWrites()

	l.mu.Lock()
	d, v := l.refreshLocked()
	if !d.Holding() {
		l.mu.Unlock()
		return 0, fmt.Errorf("bump: %w", ErrNotHolder)
	}
	e := l.claimEntryLocked(v.Lease, "")
	l.stats.ClaimsProposed++
	l.mu.Unlock()

	res, err := l.log.Propose(ctx, e)
	return l.finishClaim(ctx, "bump", e, res, err)
}

// Steal is the operator's override for a wedged holder: a forced claim at epoch+1
// whatever the lease's liveness (the apply records the prior holder and the reason in
// the lease history; its commit fencing keeps the chain fork-free). reason must not be
// empty (ErrNoReason). Like Claim it waits for the local apply; a lost CAS is
// ErrLostRace.
func (l *Lease) Steal(ctx context.Context, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return ErrNoReason
	}
	if err := l.lockWrites(ctx); err != nil {
		return fmt.Errorf("steal: %w", err)
	}
	defer l.unlockWrites()

	l.mu.Lock()
	_, v := l.refreshLocked()
	e := l.claimEntryLocked(v.Lease, reason)
	l.mu.Unlock()

	res, err := l.log.Propose(ctx, e)
	_, err = l.finishClaim(ctx, "steal", e, res, err)
	return err
}

// Renew refreshes the lease if this device holds it and half the TTL has passed since
// its last successful write; before that it returns true without writing (the write
// gate keeps the log at about two lease entries per TTL at rest). It returns whether
// this device holds the lease (and may sign) afterwards. Errors: ErrNotHolder when it
// does not hold it (including an apply rejection: the lease was lost), or the Log's
// error (outcome unknown).
func (l *Lease) Renew(ctx context.Context) (bool, error) {
	if err := l.lockWrites(ctx); err != nil {
		return false, fmt.Errorf("renew: %w", err)
	}
	defer l.unlockWrites()

	l.mu.Lock()
	d, v := l.refreshLocked()
	rec := v.Lease
	switch d.Action {
	case Hold:
		l.mu.Unlock()
		return d.Holding(), nil
	case Renew:
	default:
		l.mu.Unlock()
		return false, fmt.Errorf("renew: %w (%s)", ErrNotHolder, d.Why)
	}
	now, mono := l.clock.Now(), l.clock.Mono()
	// ts must change the record (observers restart their count on a change, and the
	// memory of this write is keyed by it) even if the wall clock stepped back.
	ts := l.uniqueTSLocked(max(l.stampLocked(now, mono), rec.TS+1))
	e := intentlog.RenewEntry{Holder: l.self, Epoch: rec.Epoch, PrevRev: rec.Rev, TS: ts}
	l.addWriteLocked(write{epoch: e.Epoch, ts: ts, mono: mono, wall: now})
	l.stats.RenewsProposed++
	l.mu.Unlock()

	res, err := l.log.Propose(ctx, e)

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.stats.ProposeErrors++
		d, _ := l.refreshLocked()
		return d.Holding(), fmt.Errorf("renew epoch %d: %w", e.Epoch, err)
	}
	if !res.Accepted {
		l.stats.Rejections[res.Reason]++
		rerr := rejected("renew", res)
		if errors.Is(rerr, ErrNotHolder) {
			// Lost: forget every write at this epoch so that a lagging view cannot
			// keep us "holding".
			l.dropWritesLocked(func(w write) bool { return w.epoch <= e.Epoch })
		} else {
			l.dropWritesLocked(func(w write) bool { return w.epoch == e.Epoch && w.ts == e.TS })
		}
		d, _ := l.refreshLocked()
		if errors.Is(rerr, ErrStaleRecord) {
			// The record still names us at this epoch; our view of it is behind (an
			// earlier write of ours, whose outcome we did not learn, was applied).
			// Not a lost lease: the window keeps bounding signing, and the next tick
			// renews on the refreshed record.
			return d.Holding(), rerr
		}
		return false, rerr
	}
	l.markOKLocked(e.Epoch, e.TS)
	l.stats.Renews++
	d, _ = l.refreshLocked()
	return d.Holding(), nil
}

// RenewOrClaim is the per-tick call: renew if due, claim if free, otherwise nothing.
// It returns whether this device holds the lease (and may sign) afterwards. Normal
// outcomes (someone else holds it, a lost race, a lost lease) are not errors; errors
// are the Log's (outcome unknown) or unexpected rejections.
func (l *Lease) RenewOrClaim(ctx context.Context) (bool, error) {
	d := l.Decide()
	var err error
	switch d.Action {
	case Renew:
		_, err = l.Renew(ctx)
	case Claim:
		_, err = l.Claim(ctx)
	}
	if errors.Is(err, ErrNotHolder) || errors.Is(err, ErrLostRace) ||
		errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrStandoff) || errors.Is(err, ErrStaleRecord) {
		err = nil
	}
	return l.Holds(), err
}

// Release gives the lease up (graceful shutdown, handover to whoever claims first).
// This device stops holding before the entry is proposed, whatever the outcome, and
// then stands off for one TTL so that a standby can take the lease. ErrNotHolder when
// the record does not name this device.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	_, v := l.refreshLocked()
	rec := v.Lease
	if rec.Holder != l.self {
		l.mu.Unlock()
		return fmt.Errorf("release: %w (holder %q)", ErrNotHolder, rec.Holder)
	}
	// Stop holding first, even if the entry cannot be proposed at all (ctx done, a
	// write stuck on a stalled replica): the standoff keeps this device from claiming
	// it back in the meantime.
	l.yieldLocked(rec)
	l.mu.Unlock()

	if err := l.lockWrites(ctx); err != nil {
		return fmt.Errorf("release epoch %d: %w", rec.Epoch, err)
	}
	defer l.unlockWrites()
	return l.proposeYield(ctx, "release", rec, func(rec intentlog.Lease) intentlog.Entry {
		return intentlog.ReleaseEntry{Holder: l.self, Epoch: rec.Epoch, PrevRev: rec.Rev}
	})
}

// Transfer hands the lease to member to at epoch+1 in one entry. Like Release, this
// device stops holding before proposing; if the apply rejects the transfer for a reason
// other than not holding (to is not a member), the hold resumes.
func (l *Lease) Transfer(ctx context.Context, to string) error {
	if to == "" || to == l.self {
		return fmt.Errorf("transfer to %q: %w", to, ErrBadTarget)
	}
	if err := l.lockWrites(ctx); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	defer l.unlockWrites()

	l.mu.Lock()
	_, v := l.refreshLocked()
	rec := v.Lease
	if rec.Holder != l.self {
		l.mu.Unlock()
		return fmt.Errorf("transfer: %w (holder %q)", ErrNotHolder, rec.Holder)
	}
	l.yieldLocked(rec)
	l.mu.Unlock()

	return l.proposeYield(ctx, "transfer", rec, func(rec intentlog.Lease) intentlog.Entry {
		ts := max(l.Stamp(), rec.TS+1)
		return intentlog.TransferEntry{Holder: l.self, Epoch: rec.Epoch, PrevRev: rec.Rev, To: to, TS: ts}
	})
}

// yieldRetries bounds how often a release or transfer is re-proposed after a stale_rev
// refusal; each retry follows the local replica past the refusal first, so one is
// normally enough.
const yieldRetries = 3

// proposeYield proposes the release or transfer that entry builds on rec, with the
// write lock held. A stale_rev refusal means the record still names this device at
// rec's epoch but its revision moved: an earlier write of this device's own (a renewal
// in flight when the handover began, applied on the leader before this replica saw it)
// landed after rec was read. The handover is then rebuilt on the record as the replica
// shows it once it has applied the refusal's index, instead of failing (and resuming
// the hold) for a race the caller cannot act on.
func (l *Lease) proposeYield(ctx context.Context, op string, rec intentlog.Lease, entry func(intentlog.Lease) intentlog.Entry) error {
	for attempt := 0; ; attempt++ {
		res, err := l.log.Propose(ctx, entry(rec))
		if err == nil && !res.Accepted && res.Reason == intentlog.ReasonStaleRev && attempt < yieldRetries &&
			l.waitApplied(ctx, res.Index) == nil {
			if fresh := l.log.View().Lease; fresh.Holder == l.self && fresh.Epoch == rec.Epoch && fresh.Rev != rec.Rev {
				l.mu.Lock()
				l.stats.Rejections[res.Reason]++
				l.mu.Unlock()
				rec = fresh
				continue
			}
		}
		return l.finishYield(op, rec, res, err)
	}
}

func (l *Lease) lockWrites(ctx context.Context) error {
	select {
	case l.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Lease) unlockWrites() { <-l.wsem }

// notClaimableLocked explains why the policy does not allow a claim.
func (l *Lease) notClaimableLocked(d Decision, rec intentlog.Lease) error {
	if d.Why == WhyStandoff {
		return fmt.Errorf("claim: %w (for %v more)", ErrStandoff, d.WakeIn(l.clock.Mono()))
	}
	return &HeldError{
		Holder:        rec.Holder,
		Epoch:         rec.Epoch,
		Expires:       time.UnixMilli(rec.TS).Add(d.TTL).UTC(),
		ClaimableIn:   d.ExpiresIn(),
		SuspectedSkew: d.SuspectedSkew,
	}
}

// claimEntryLocked builds a claim (a steal when reason is set) on rec and remembers it
// as a pending write, stamped just before it is proposed. It names rec's revision: the
// apply accepts it only if the stored record is still the one it was decided on.
func (l *Lease) claimEntryLocked(rec intentlog.Lease, reason string) intentlog.ClaimEntry {
	now, mono := l.clock.Now(), l.clock.Mono()
	e := intentlog.ClaimEntry{
		Holder:  l.self,
		Epoch:   rec.Epoch + 1,
		PrevRev: rec.Rev,
		TS:      l.uniqueTSLocked(l.claimStampLocked(rec, now, mono)),
		TTL:     l.pol.TTL.Milliseconds(),
		Force:   reason != "",
		Reason:  reason,
		Nonce:   l.nonce,
	}
	l.addWriteLocked(write{epoch: e.Epoch, ts: e.TS, mono: mono, wall: now})
	return e
}

func (l *Lease) finishClaim(ctx context.Context, op string, e intentlog.ClaimEntry, res intentlog.Result, err error) (uint64, error) {
	l.mu.Lock()
	if err != nil {
		// Outcome unknown: the write stays remembered as pending, so that if the
		// record later shows it (same epoch, ts and nonce) this device holds it,
		// counted from the proposal time.
		l.stats.ProposeErrors++
		l.mu.Unlock()
		return 0, fmt.Errorf("%s epoch %d: %w", op, e.Epoch, err)
	}
	if !res.Accepted {
		l.stats.Rejections[res.Reason]++
		rerr := rejected(op, res)
		if errors.Is(rerr, ErrLostRace) {
			l.stats.LostRaces++
		}
		l.dropWritesLocked(func(w write) bool { return w.epoch == e.Epoch && w.ts == e.TS })
		l.mu.Unlock()
		return 0, rerr
	}
	l.markOKLocked(e.Epoch, e.TS)
	l.standoff, l.yielding = 0, false
	if e.Force {
		l.stats.Steals++
	} else {
		l.stats.Claims++
	}
	l.mu.Unlock()

	// DESIGN: after winning a claim, wait until the own replica has applied it before
	// building on the head (Holds stays false until the local record shows it anyway).
	if err := l.waitApplied(ctx, res.Index); err != nil {
		return 0, fmt.Errorf("%s epoch %d accepted at index %d; wait for local apply: %w", op, e.Epoch, res.Index, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d, v := l.refreshLocked()
	if !d.Holding() || v.Lease.Epoch != e.Epoch {
		return 0, fmt.Errorf("%s epoch %d: %w: superseded by holder %q epoch %d", op, e.Epoch, ErrNotHolder, v.Lease.Holder, v.Lease.Epoch)
	}
	return e.Epoch, nil
}

// yieldLocked stops holding rec's epoch before a release or transfer is proposed.
func (l *Lease) yieldLocked(rec intentlog.Lease) {
	l.yielding, l.yieldEp = true, rec.Epoch
	l.standoff = l.clock.Mono() + RecordTTL(rec, l.pol.TTL)
	l.refreshLocked() // ends the tenure
}

func (l *Lease) finishYield(op string, rec intentlog.Lease, res intentlog.Result, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.stats.ProposeErrors++
		return fmt.Errorf("%s epoch %d: %w", op, rec.Epoch, err)
	}
	if !res.Accepted {
		l.stats.Rejections[res.Reason]++
		rerr := rejected(op, res)
		if !errors.Is(rerr, ErrNotHolder) {
			// Nothing changed and we still hold it: resume.
			l.yielding, l.standoff = false, 0
			l.refreshLocked()
		}
		return rerr
	}
	switch op {
	case "release":
		l.stats.Releases++
	case "transfer":
		l.stats.Transfers++
	}
	l.dropWritesLocked(func(w write) bool { return w.epoch <= rec.Epoch })
	l.refreshLocked()
	return nil
}

// waitApplied waits until the local replica has applied index.
func (l *Lease) waitApplied(ctx context.Context, index uint64) error {
	if w, ok := l.log.(AppliedWaiter); ok {
		return w.WaitApplied(ctx, index)
	}
	// Polling a non-blocking read with a short real-time backoff: this is waiting for
	// replication, not lease timing, so it does not go through the Clock.
	delay := 500 * time.Microsecond
	for l.log.View().AppliedIndex < index {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
	return nil
}

// refreshLocked reads the applied record, updates the observation tracker, decides, and
// starts or ends the tenure accordingly.
func (l *Lease) refreshLocked() (Decision, intentlog.View) {
	v := l.log.View()
	mono, now := l.clock.Mono(), l.clock.Now()
	rec := v.Lease
	if !l.seen || rec != l.cur {
		if l.seen {
			l.prev, l.havePrev = l.cur, true
		}
		l.cur, l.firstSeen, l.seen, l.skewNoted = rec, l.storedLocked(rec, mono), true, false
		l.dropWritesLocked(func(w write) bool { return w.epoch < rec.Epoch })
		if l.standoff != 0 && rec.Epoch > l.yieldEp {
			// Someone took the lease after our release or transfer: the standoff (which
			// lets a standby pick up what we gave away) has served its purpose. Keeping
			// it would stall a later handover with every standby standing off.
			l.standoff = 0
		}
	}
	in := Input{
		Record:       rec,
		Self:         l.self,
		Now:          now,
		Mono:         mono,
		FirstSeen:    l.firstSeen,
		Previous:     l.prev,
		HavePrevious: l.havePrev,
		Own:          l.ownLocked(rec),
		Standoff:     l.standoff,
	}
	in.EverHeld = l.everHeld
	d := l.pol.Decide(in)
	if d.SuspectedSkew {
		l.stats.LastSkew = SkewReport{At: now, Holder: rec.Holder, Epoch: rec.Epoch, Observed: d.Observed, WallAge: d.WallAge}
		if !l.skewNoted {
			l.skewNoted = true
			l.stats.SkewSuspicions++
		}
	}
	if d.Holding() {
		if l.ten != nil && l.ten.epoch != rec.Epoch {
			l.endLocked()
		}
		if l.ten == nil {
			ctx, cancel := context.WithCancelCause(context.Background())
			l.ten = &tenure{epoch: rec.Epoch, done: make(chan struct{}), ctx: ctx, cancel: cancel}
			l.stats.HoldsStarted++
		}
		l.armLocked(d.SignUntil, mono)
	} else if l.ten != nil {
		l.endLocked()
	}
	return d, v
}

// storedLocked is when this device starts counting rec as observed, at mono when it
// sees rec replace the record before: when its replica stored the entry that made rec
// (StoreTimer), never later than mono. Without a store time (a Log without the
// capability, an entry applied from a snapshot or replayed at start), mono.
func (l *Lease) storedLocked(rec intentlog.Lease, mono time.Duration) time.Duration {
	st, ok := l.log.(StoreTimer)
	if !ok || rec.Rev == 0 {
		return mono
	}
	if at, ok := st.StoredAt(rec.Rev); ok && at < mono {
		return at
	}
	return mono
}

// ownLocked matches rec against this device's remembered writes. A record is this
// process's only if its hold was claimed by this process (rec.Nonce, which renewals
// keep); then a write of it is known by its epoch and ts, which uniqueTSLocked keeps
// distinct within the process.
func (l *Lease) ownLocked(rec intentlog.Lease) OwnWrite {
	if rec.Holder != l.self || rec.Nonce != l.nonce || (l.yielding && rec.Epoch == l.yieldEp) {
		return OwnWrite{}
	}
	matched := false
	for i := range l.writes {
		w := &l.writes[i]
		if w.epoch == rec.Epoch && w.ts == rec.TS {
			matched = true
			if !w.ok {
				w.ok = true // the record proves it was applied
			}
		}
	}
	if !matched {
		return OwnWrite{}
	}
	l.everHeld = true
	var own OwnWrite
	for _, w := range l.writes {
		if w.ok && w.epoch == rec.Epoch && (!own.Valid || w.mono > own.Mono) {
			own = OwnWrite{Valid: true, Mono: w.mono, Wall: w.wall}
		}
	}
	return own
}

// uniqueTSLocked returns ts, raised above every ts this Lease has proposed before, and
// remembers it. Within a process the record names a write by (epoch, ts) alone (the
// claim's nonce tells processes apart, not writes of one process): two proposals with one
// key (retries of a renewal whose outcome was unknown while the wall clock was behind
// the record: ts = rec.TS+1 each time) would make the record of the first one, applied
// late, count from the last one's proposal time, and the hold would outlast what
// others allow it (seed 4634 of testnet/sim: a hold_overlap). Raising ts costs
// nothing: a ts ahead of this device's wall clock only delays others' lapse.
func (l *Lease) uniqueTSLocked(ts int64) int64 {
	ts = max(ts, l.lastTS+1)
	l.lastTS = ts
	return ts
}

func (l *Lease) addWriteLocked(w write) {
	l.writes = append(l.writes, w)
	if len(l.writes) > maxWrites {
		l.writes = append(l.writes[:0], l.writes[len(l.writes)-maxWrites:]...)
	}
}

func (l *Lease) markOKLocked(epoch uint64, ts int64) {
	for i := range l.writes {
		if l.writes[i].epoch == epoch && l.writes[i].ts == ts {
			l.writes[i].ok = true
		}
	}
	l.everHeld = true
}

func (l *Lease) dropWritesLocked(drop func(write) bool) {
	kept := l.writes[:0]
	for _, w := range l.writes {
		if !drop(w) {
			kept = append(kept, w)
		}
	}
	l.writes = kept
}

// armLocked makes sure a timer will re-observe when the may-sign window closes, so that
// Lost fires on time even if nobody calls in.
func (l *Lease) armLocked(at, mono time.Duration) {
	c, ok := l.clock.(AfterFuncClock)
	if !ok || (l.stopTimer != nil && l.timerAt == at) {
		return
	}
	if l.stopTimer != nil {
		l.stopTimer()
	}
	l.timerAt = at
	l.stopTimer = c.AfterFunc(at-mono, l.Observe)
}

func (l *Lease) endLocked() {
	// Cancel first: whoever sees Done closed must find the context's cause set.
	l.ten.cancel(ErrLost)
	close(l.ten.done)
	l.ten = nil
	l.stats.HoldsEnded++
	if l.stopTimer != nil {
		l.stopTimer()
		l.stopTimer = nil
	}
}
