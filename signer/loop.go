package signer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// Defaults for LoopConfig fields left zero.
const (
	DefaultTick          = 2 * time.Second
	DefaultMaxBatchCount = 1024
	// DefaultMaxBatchBytes bounds path+value bytes per commit, well below
	// intentlog.MaxEntryBytes (16 MiB) so that ids and CBOR overhead always fit.
	DefaultMaxBatchBytes int64 = 4 << 20
	// DefaultWedgeTimeout is used when the lease record carries no TTL.
	DefaultWedgeTimeout = election.DefaultTTL
	// DefaultReleaseTimeout bounds the Release written on a graceful stop.
	DefaultReleaseTimeout = 5 * time.Second
)

// ChainLog is what the loop needs from the intent log. *intentlog.Log has every
// method; the node supplies a wrapper whose Propose forwards to the Raft leader. All
// reads must be local and must never wait on Raft.
type ChainLog interface {
	// View returns the locally applied hot state without blocking.
	View() intentlog.View
	// Pending returns the oldest pending intents, oldest first, bounded by count and
	// path+value bytes (the oldest one is always returned).
	Pending(maxCount int, maxBytes int64) ([]intentlog.Intent, error)
	// Watch returns a channel closed after the next applied change.
	Watch() <-chan struct{}
	// Commit returns the full encoding of the applied commit at seq.
	Commit(seq uint64) ([]byte, error)
	// Propose appends e to the replicated log and returns its apply Result. An error
	// means the outcome is unknown.
	Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error)
}

// Lease is what the loop needs from the lease (*election.Lease has every method).
type Lease interface {
	// RenewOrClaim renews if due, claims if free; it reports whether this device
	// holds the lease and may sign afterwards. It honours ctx.
	RenewOrClaim(ctx context.Context) (bool, error)
	// Holds reports whether this device holds the lease and may sign now, without
	// waiting on Raft.
	Holds() bool
	// Epoch is the epoch of the current hold, 0 when not holding.
	Epoch() uint64
	// Release gives the lease up. The hold must end (Holds false, no more renewals)
	// even when the write fails; the loop retries a failed release of a wedged hold
	// once per tick while Holds still reports it.
	Release(ctx context.Context) error
}

// inflightSource is an optional capability of a ChainLog (the node's proposer has
// it): the intents entries this device has already handed to its own Raft leader's
// apply queue and whose apply the local replica does not show yet, oldest first. A
// commit proposed after reading them is appended behind them, so the loop may sign
// them at once ("predicted" ops) and the Intents entry and its Commit share a Raft
// round. The apply remains the only fence: a wrong prediction is refused (bad_ops).
type inflightSource interface {
	Inflight() [][]intentlog.Intent
}

// leaseDecider is an optional capability of a Lease (*election.Lease has it): the
// policy's next deadline, so that the lease tick wakes exactly then.
type leaseDecider interface {
	Decide() election.Decision
}

// Clock is the loop's time source; election.Clock implementations (SystemClock,
// ManualClock) satisfy it. If it also has AfterFunc (election.AfterFuncClock), the
// loop's timers run on it, so a ManualClock drives them in tests.
type Clock interface {
	Now() time.Time
	Mono() time.Duration
}

type afterFuncClock interface {
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

var (
	_ ChainLog = (*intentlog.Log)(nil)
	_ Lease    = (*election.Lease)(nil)
	_ Clock    = (*election.ManualClock)(nil)
)

// LoopConfig configures NewLoop. Self, Key, Lease and Log are required.
type LoopConfig struct {
	Self  string    // this device's libp2p peer ID (the commits' signer)
	Key   chain.Key // the chain key
	Lease Lease     // this device's lease handle
	Log   ChainLog  // the intent log
	// Clock defaults to election.SystemClock().
	Clock Clock
	// Tick is the lease tick (RenewOrClaim). Optional, defaults to DefaultTick. The
	// loop also wakes at the lease policy's next deadline when earlier.
	Tick time.Duration
	// CallTimeout bounds every lease write and commit proposal. Optional, defaults to
	// 3/4 of Tick; must be shorter than Tick so a stalled replica cannot hold up the
	// next tick.
	CallTimeout time.Duration
	// MaxBatchCount and MaxBatchBytes bound one commit's ops (count, path+value
	// bytes). Optional, default DefaultMaxBatchCount and DefaultMaxBatchBytes.
	MaxBatchCount int
	MaxBatchBytes int64
	// WedgeTimeout: a holder with pending intents none of whose commits applied for
	// this long releases the lease. Optional, defaults to the lease record's TTL
	// (DefaultWedgeTimeout if the record has none).
	WedgeTimeout time.Duration
	// ReleaseTimeout bounds the Release on a graceful stop. Optional, defaults to
	// DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *LoopConfig) validate() error {
	switch {
	case c.Self == "":
		return fmt.Errorf("%w: Self is required", ErrBadConfig)
	case c.Key == nil:
		return fmt.Errorf("%w: Key is required", ErrBadConfig)
	case c.Lease == nil:
		return fmt.Errorf("%w: Lease is required", ErrBadConfig)
	case c.Log == nil:
		return fmt.Errorf("%w: Log is required", ErrBadConfig)
	case c.Tick < 0 || c.CallTimeout < 0 || c.MaxBatchCount < 0 || c.MaxBatchBytes < 0 || c.WedgeTimeout < 0 || c.ReleaseTimeout < 0:
		return fmt.Errorf("%w: negative duration or limit", ErrBadConfig)
	}
	if ls, ok := c.Lease.(interface{ Self() string }); ok && ls.Self() != c.Self {
		// The apply accepts commits only from the lease holder: a mismatch would sign
		// commits every replica refuses.
		return fmt.Errorf("%w: lease is for %q but Self is %q", ErrBadConfig, ls.Self(), c.Self)
	}
	if _, err := chain.ParseDID(c.Key.DID()); err != nil {
		return fmt.Errorf("%w: chain key: %w", ErrBadConfig, err)
	}
	if c.Clock == nil {
		c.Clock = election.SystemClock()
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.Tick * 3 / 4
	}
	if c.CallTimeout >= c.Tick {
		return fmt.Errorf("%w: CallTimeout %v must be shorter than Tick %v", ErrBadConfig, c.CallTimeout, c.Tick)
	}
	if c.MaxBatchCount == 0 {
		c.MaxBatchCount = DefaultMaxBatchCount
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxBatchBytes > intentlog.MaxEntryBytes/2 {
		return fmt.Errorf("%w: MaxBatchBytes %d above half of intentlog.MaxEntryBytes", ErrBadConfig, c.MaxBatchBytes)
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = DefaultReleaseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// LoopStats are the loop's counters, for metrics and the state endpoint.
type LoopStats struct {
	Ticks            uint64 // RenewOrClaim calls
	TickErrors       uint64 // RenewOrClaim errors (outcome unknown or unexpected)
	CommitsProposed  uint64
	CommitsAccepted  uint64
	CommitsRejected  uint64 // rejected by the apply (see Rejections)
	ProposeErrors    uint64 // outcome unknown (timeout, no leader, ...)
	SignErrors       uint64 // the Key failed to sign
	StepDowns        uint64 // a commit was rejected because the epoch moved on
	WedgeReleases    uint64 // releases of a wedged hold
	LastSigned       uint64 // seq of the last commit this loop got accepted
	LastSignedEpoch  uint64
	Rejections       map[intentlog.Reason]uint64
	LastError        string // the last sign/propose/tick error, for the state endpoint
	LastErrorAt      time.Time
	HeldAtLastTick   bool
	Steps            uint64 // signer evaluations (each looks at the applied state once)
	PendingAtLastRun int
	// Predicted counts commits whose ops included intents of an entry not yet
	// applied here (inflightSource); Mispredicted those the apply refused for their
	// ops (the loop then signs on the applied state); Reproposed re-sends of a commit
	// whose first proposal had an unknown outcome (the same bytes, never re-signed).
	Predicted    uint64
	Mispredicted uint64
	Reproposed   uint64
}

// Loop is the signer loop of one device: a lease tick that renews or claims, and a
// signer that, while this device holds the lease, turns the oldest pending intents
// into signed commits on the locally applied head, as soon as they are pending.
//
// Safety does not rest on the loop: the apply accepts a commit only at the stored
// lease epoch and holder, on the head hash, with the oldest pending intents. The loop
// only keeps a device that may not sign from trying: it checks Holds right before
// signing and right before proposing, never retries on an epoch the apply refused,
// and gives up a hold it cannot make progress on.
type Loop struct {
	cfg LoopConfig
	log *slog.Logger

	running atomic.Bool
	// parked counts goroutines waiting with an armed timer that has not fired (tests
	// wait for both before advancing a ManualClock, so that no timer is armed late).
	parked  atomic.Int32
	kickSig chan struct{} // lease state may have changed: re-check signing
	kickTk  chan struct{} // run a lease tick now

	mu    sync.Mutex
	stats LoopStats

	// Signer state, owned by the signing goroutine.
	deadEpoch  atomic.Uint64 // never sign at or below this epoch again
	awaitSeq   uint64        // head seq of our last accepted commit: wait for the local apply
	lastHead   uint64        // head seq last seen (progress)
	wedgeSince time.Duration // mono when the current no-progress stretch began; -1: none
	wedgeEpoch uint64        // the epoch given up as wedged (its release is retried while held)
	// unsure is the last signed commit whose proposal had an unknown outcome: it may
	// still apply, so no other commit is signed for its seq until the local replica
	// shows that it cannot (head at or past its seq, or another epoch); meanwhile it
	// is proposed again as is.
	unsure *signedCommit
	// noPredict: the last predicted commit was refused for its ops; the next one is
	// built on the applied queue only.
	noPredict bool
}

// signedCommit is a commit this loop signed, as proposed.
type signedCommit struct {
	raw   []byte
	seq   uint64
	epoch uint64
	ops   int
	// predicted: its ops included intents not yet applied when it was signed.
	predicted bool
}

// NewLoop validates cfg and returns a Loop. It does not start it.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Loop{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "signer", "self", cfg.Self),
		kickSig:    make(chan struct{}, 1),
		kickTk:     make(chan struct{}, 1),
		stats:      LoopStats{Rejections: map[intentlog.Reason]uint64{}},
		wedgeSince: -1,
	}, nil
}

// Stats returns a copy of the counters.
func (l *Loop) Stats() LoopStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Rejections = make(map[intentlog.Reason]uint64, len(l.stats.Rejections))
	for k, v := range l.stats.Rejections {
		s.Rejections[k] = v
	}
	return s
}

func (l *Loop) count(f func(s *LoopStats)) {
	l.mu.Lock()
	f(&l.stats)
	l.mu.Unlock()
}

func (l *Loop) noteErr(err error) {
	now := l.cfg.Clock.Now()
	l.count(func(s *LoopStats) { s.LastError, s.LastErrorAt = err.Error(), now })
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// arm returns a channel closed d from now on the loop's clock, and a disarm func to
// call once done waiting. From arm until the timer fires or disarm is called, the
// calling goroutine counts as parked (see Loop.parked).
func (l *Loop) arm(d time.Duration) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var unparkOnce, closeOnce sync.Once
	unpark := func() { unparkOnce.Do(func() { l.parked.Add(-1) }) }
	l.parked.Add(1)
	// With a ManualClock, fire runs inside Advance: the goroutine stops counting as
	// parked before Advance returns, so a test cannot advance again before it re-arms.
	fire := func() { unpark(); closeOnce.Do(func() { close(ch) }) }
	var stop func()
	if ac, ok := l.cfg.Clock.(afterFuncClock); ok {
		s := ac.AfterFunc(d, fire)
		stop = func() { s() }
	} else {
		t := time.AfterFunc(d, fire)
		stop = func() { t.Stop() }
	}
	return ch, func() { stop(); unpark() }
}

// Wake makes the signer look at the state again (an intents entry was queued).
func (l *Loop) Wake() { kick(l.kickSig) }

// Run runs the lease tick and the signer until ctx is done. On a graceful stop it
// releases the lease if this device holds it (bounded by ReleaseTimeout), so that a
// standby can claim at once. It returns nil after a stop, or the release's error.
func (l *Loop) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer l.running.Store(false)
	l.log.Info("signer loop starting", "chain", l.cfg.Key.DID(), "tick", l.cfg.Tick)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.leaseLoop(ctx) }()
	go func() { defer wg.Done(); l.signLoop(ctx) }()
	wg.Wait()

	// Both goroutines have stopped: nothing will be proposed after the release.
	held := l.cfg.Lease.Holds()
	if !held {
		v := l.cfg.Log.View()
		held = v.Lease.Holder == l.cfg.Self
	}
	if !held {
		l.log.Info("signer loop stopped")
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ReleaseTimeout)
	defer cancel()
	if err := l.cfg.Lease.Release(rctx); err != nil && !errors.Is(err, election.ErrNotHolder) {
		l.log.Warn("signer loop stopped; releasing the lease failed (standbys will claim after the ttl)", "err", err)
		return fmt.Errorf("release on stop: %w", err)
	}
	l.log.Info("signer loop stopped; lease released")
	return nil
}

// leaseLoop calls RenewOrClaim every tick (or at the policy's next deadline when that
// is sooner), each call bounded by CallTimeout.
func (l *Loop) leaseLoop(ctx context.Context) {
	wasHeld := false
	for {
		seen := l.cfg.Log.View().Lease // before the tick: a change during it is not lost
		cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
		held, err := l.cfg.Lease.RenewOrClaim(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.count(func(s *LoopStats) { s.Ticks++; s.HeldAtLastTick = held })
		if err != nil {
			l.count(func(s *LoopStats) { s.TickErrors++ })
			l.noteErr(err)
			l.log.Warn("lease tick failed", "err", err, "holds", held)
		}
		if held != wasHeld {
			l.log.Info("lease hold changed", "holds", held, "epoch", l.cfg.Lease.Epoch())
			wasHeld = held
		}
		kick(l.kickSig)

		wait := l.cfg.Tick
		if ld, ok := l.cfg.Lease.(leaseDecider); ok {
			// Wake exactly at the policy's next deadline (renewal due, window end,
			// lapse) when it comes before the tick.
			w := ld.Decide().WakeIn(l.cfg.Clock.Mono())
			if w == 0 {
				// Still due right after RenewOrClaim: its write failed (no leader, a
				// timeout). A renewal has only until the may-sign window closes, so
				// retry sooner than a whole tick, but never in a spin.
				w = l.cfg.Tick / 4
			}
			wait = min(wait, w)
		}
		timer, disarm := l.arm(wait)
		if !l.waitLease(ctx, timer, seen) {
			disarm()
			return
		}
		disarm()
	}
}

// waitLease waits for the timer, a kick, or an applied change of the lease record
// (a release, a transfer, a claim or renewal by another device): a standby must act
// on a released lease at once, not at its next tick, so that a graceful handover
// takes a few Raft round trips. It reports false when ctx is done.
func (l *Loop) waitLease(ctx context.Context, timer <-chan struct{}, seen intentlog.Lease) bool {
	watch := l.cfg.Log.Watch() // before reading: no change lost
	for {
		v := l.cfg.Log.View()
		if v.Lease != seen {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer:
			return true
		case <-l.kickTk:
			return true
		case <-watch:
			watch = l.cfg.Log.Watch()
			if l.cfg.Log.View().AppliedIndex == v.AppliedIndex {
				watch = nil // woke without a change (a closed log): wait for the timer
			}
		}
	}
}

// Result of one signer step.
type stepResult int

const (
	stepAgain stepResult = iota // made progress: look again at once
	stepWait                    // nothing to do until the log or the lease changes
	stepRetry                   // failed: retry at the next tick even if nothing changes
)

func (l *Loop) signLoop(ctx context.Context) {
	var idle <-chan struct{} // never fires
	suspect := false         // the last watch wakeup changed nothing (a closed log?)
	for {
		watch := l.cfg.Log.Watch() // before reading: no wakeup lost
		applied := l.cfg.Log.View().AppliedIndex
		r := l.step(ctx)
		if ctx.Err() != nil {
			return
		}
		if r == stepAgain {
			continue
		}
		if r == stepRetry || suspect {
			// After a failure retry at the tick, not at the next applied change
			// (a persistent failure must not turn every change into an attempt);
			// and a watch channel that fires without a change is not waited on.
			watch = idle
		}
		// Wait for an applied change or a lease change. The tick timer is a safety
		// net (and the retry delay after a failure), and it lets the wedge detector
		// run while nothing changes.
		timer, disarm := l.arm(l.cfg.Tick)
		woke := false
		select {
		case <-ctx.Done():
		case <-watch:
			woke = true
		case <-l.kickSig:
		case <-timer:
		}
		disarm()
		suspect = woke && l.cfg.Log.View().AppliedIndex == applied
	}
}

// canSign reports the epoch this device may sign under now, or 0.
func (l *Loop) canSign(v intentlog.View) uint64 {
	epoch := l.cfg.Lease.Epoch()
	if epoch == 0 || epoch <= l.deadEpoch.Load() || !l.cfg.Lease.Holds() {
		return 0
	}
	// After winning a claim, build only once the local replica shows it.
	if v.Lease.Holder != l.cfg.Self || v.Lease.Epoch != epoch {
		return 0
	}
	return epoch
}

func (l *Loop) stillHolds(epoch uint64) bool {
	return l.cfg.Lease.Holds() && l.cfg.Lease.Epoch() == epoch && epoch > l.deadEpoch.Load()
}

func (l *Loop) step(ctx context.Context) stepResult {
	v := l.cfg.Log.View()
	mono := l.cfg.Clock.Mono()
	l.count(func(s *LoopStats) { s.Steps++; s.PendingAtLastRun = v.Pending })
	if v.Head.Seq != l.lastHead {
		l.lastHead = v.Head.Seq
		l.wedgeSince = -1 // a commit applied: the chain moves
	}
	if we := l.wedgeEpoch; we != 0 && l.cfg.Lease.Epoch() == we && l.cfg.Lease.Holds() {
		// The release of a wedged hold failed and the lease still holds it: a hold we
		// will not sign under must not be renewed. Try again, once per tick.
		l.releaseWedged(ctx, we, v, 0)
		return stepRetry
	}
	epoch := l.canSign(v)
	if epoch == 0 {
		l.wedgeSince = -1
		return stepWait
	}
	if v.Pending == 0 {
		l.wedgeSince = -1 // intents only in flight do not count as waiting
	} else {
		if l.wedgeSince < 0 {
			l.wedgeSince = mono
		}
		if timeout := l.wedgeTimeout(v); mono-l.wedgeSince >= timeout {
			l.releaseWedged(ctx, epoch, v, mono-l.wedgeSince)
			return stepWait
		}
	}
	if v.Head.Seq < l.awaitSeq {
		return stepWait // our last commit is accepted but not applied here yet
	}
	if u := l.unsure; u != nil {
		// Any later apply of u runs on a state that descends from the local one:
		// with the head at or past its seq, or the epoch moved on, it can no longer
		// apply.
		if v.Head.Seq >= u.seq || v.Lease.Epoch != u.epoch || epoch != u.epoch {
			l.unsure = nil
		} else {
			if !l.stillHolds(epoch) {
				return stepWait
			}
			l.count(func(s *LoopStats) { s.Reproposed++ })
			return l.propose(ctx, u, v)
		}
	}

	var ops []intentlog.Intent
	if v.Pending > 0 {
		var err error
		if ops, err = l.cfg.Log.Pending(l.cfg.MaxBatchCount, l.cfg.MaxBatchBytes); err != nil {
			l.noteErr(err)
			l.log.Error("reading pending intents failed", "err", err)
			return stepRetry
		}
	}
	predicted := false
	if fs, ok := l.cfg.Log.(inflightSource); ok && !l.noPredict && len(ops) == v.Pending {
		// Read after Pending: an entry applied in between is either in ops (and
		// skipped below) or no longer reported as in flight.
		ops, predicted = l.predict(ops, fs.Inflight())
	}
	if len(ops) == 0 {
		return stepWait
	}
	l.noPredict = false
	c := chain.Commit{
		Seq:    v.Head.Seq + 1,
		Epoch:  epoch,
		Signer: l.cfg.Self,
		Ops:    Ops(ops),
		Time:   l.cfg.Clock.Now().UnixMilli(),
	}
	if v.Head.Seq > 0 {
		c.Prev = append([]byte(nil), v.Head.Hash[:]...)
	}

	if !l.stillHolds(epoch) { // right before signing
		return stepWait
	}
	raw, err := chain.Sign(l.cfg.Key, c)
	if err != nil {
		l.count(func(s *LoopStats) { s.SignErrors++ })
		l.noteErr(err)
		l.log.Error("signing a commit failed", "seq", c.Seq, "epoch", epoch, "err", err)
		return stepRetry
	}
	if predicted {
		l.count(func(s *LoopStats) { s.Predicted++ })
	}
	if !l.stillHolds(epoch) { // right before proposing
		// Signed but never proposed: it cannot apply, nothing else holds it.
		return stepWait
	}
	return l.propose(ctx, &signedCommit{raw: raw, seq: c.Seq, epoch: epoch, ops: len(ops), predicted: predicted}, v)
}

// predict appends to ops (the applied queue, complete) the in-flight intents, in
// order, within the batch limits. An entry with an intent already in ops was applied
// meanwhile and is skipped; an ID repeated within the prediction is left out, as the
// apply would (a no-op duplicate).
func (l *Loop) predict(ops []intentlog.Intent, flight [][]intentlog.Intent) ([]intentlog.Intent, bool) {
	if len(flight) == 0 {
		return ops, false
	}
	seen := make(map[string]bool, len(ops))
	var size int64
	for _, in := range ops {
		seen[in.ID] = true
		size += int64(len(in.Path) + len(in.Value))
	}
	added := false
entries:
	for _, e := range flight {
		for _, in := range e {
			if seen[in.ID] {
				continue entries // applied already: its intents are in ops
			}
		}
		for _, in := range e {
			sz := int64(len(in.Path) + len(in.Value))
			if len(ops) >= l.cfg.MaxBatchCount || (len(ops) > 0 && size+sz > l.cfg.MaxBatchBytes) {
				break entries // the rest goes into the next commit
			}
			if seen[in.ID] {
				continue
			}
			seen[in.ID] = true
			size += sz
			ops = append(ops, in)
			added = true
		}
	}
	return ops, added
}

// propose proposes sc and handles the apply's answer. v is the view sc was built on.
func (l *Loop) propose(ctx context.Context, sc *signedCommit, v intentlog.View) stepResult {
	epoch := sc.epoch
	pctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	res, err := l.cfg.Log.Propose(pctx, intentlog.CommitEntry{Raw: sc.raw})
	cancel()
	l.count(func(s *LoopStats) { s.CommitsProposed++ })
	if err != nil {
		// Outcome unknown: sc may still apply. Until the local replica shows that it
		// cannot, the only commit proposed for its seq is sc itself, again (at the
		// next tick, not in a spin).
		l.unsure = sc
		if ctx.Err() != nil {
			return stepWait
		}
		l.count(func(s *LoopStats) { s.ProposeErrors++ })
		l.noteErr(err)
		l.log.Warn("proposing a commit failed (outcome unknown)", "seq", sc.seq, "epoch", epoch, "ops", sc.ops, "err", err)
		return stepRetry
	}
	// A definitive answer: sc was applied (accepted or refused) at res.Index.
	l.unsure = nil
	if !res.Accepted {
		l.count(func(s *LoopStats) { s.CommitsRejected++; s.Rejections[res.Reason]++ })
		switch {
		case res.Reason == intentlog.ReasonEpochMismatch || res.Reason == intentlog.ReasonNotHolder:
			// The epoch moved on: this hold is over whatever the lease thinks.
			l.markDead(epoch)
			l.count(func(s *LoopStats) { s.StepDowns++ })
			l.log.Warn("commit refused: the lease epoch moved on; stepping down", "seq", sc.seq, "epoch", epoch,
				"reason", res.Reason, "lease_holder", res.Lease.Holder, "lease_epoch", res.Lease.Epoch)
			kick(l.kickTk)
			return stepWait
		case (res.Reason == intentlog.ReasonBadPrev || res.Reason == intentlog.ReasonBadSeq) && res.Head.Seq > v.Head.Seq:
			// Built on a stale view: the leader's head is ahead of ours. Build
			// again once the local replica has applied it.
			l.awaitSeq = max(l.awaitSeq, res.Head.Seq)
			l.log.Info("commit refused: local head behind; retrying once it catches up", "seq", sc.seq, "epoch", epoch,
				"reason", res.Reason, "leader_head", res.Head.Seq)
			return stepWait
		case res.Reason == intentlog.ReasonBadOps && sc.predicted:
			// The in-flight entry did not apply as predicted (a repeated ID, a lost
			// entry, another device's entry in between): sign on the applied queue.
			l.noPredict = true
			l.count(func(s *LoopStats) { s.Mispredicted++ })
			l.log.Debug("predicted commit refused for its ops; signing on the applied state", "seq", sc.seq, "epoch", epoch)
			return stepAgain
		}
		// Not explained by a stale view or a prediction (a wrong chain key, a bug):
		// retrying at once would flood the log, so back off to the tick; if it
		// persists the wedge detector gives the lease up.
		err := fmt.Errorf("commit seq %d epoch %d refused: %s", sc.seq, epoch, res.Reason)
		l.noteErr(err)
		l.log.Error("commit refused", "seq", sc.seq, "epoch", epoch, "reason", res.Reason, "head_seq", res.Head.Seq)
		return stepRetry
	}
	l.awaitSeq = sc.seq
	l.wedgeSince = -1
	l.count(func(s *LoopStats) {
		s.CommitsAccepted++
		s.LastSigned, s.LastSignedEpoch = sc.seq, epoch
	})
	l.log.Debug("commit accepted", "seq", sc.seq, "epoch", epoch, "ops", sc.ops, "index", res.Index)
	return stepAgain
}

func (l *Loop) markDead(epoch uint64) {
	for {
		cur := l.deadEpoch.Load()
		if epoch <= cur || l.deadEpoch.CompareAndSwap(cur, epoch) {
			return
		}
	}
}

func (l *Loop) wedgeTimeout(v intentlog.View) time.Duration {
	if l.cfg.WedgeTimeout > 0 {
		return l.cfg.WedgeTimeout
	}
	if v.Lease.TTL > 0 {
		return time.Duration(v.Lease.TTL) * time.Millisecond
	}
	return DefaultWedgeTimeout
}

// releaseWedged gives up a hold under which nothing was applied for a whole wedge
// timeout while intents waited: keeping it (and renewing it) would block the chain.
func (l *Loop) releaseWedged(ctx context.Context, epoch uint64, v intentlog.View, stuck time.Duration) {
	if l.wedgeEpoch != epoch {
		st := l.Stats()
		l.log.Error("wedged: intents pending but no commit applied; releasing the lease",
			"epoch", epoch, "pending", v.Pending, "head_seq", v.Head.Seq, "stuck_for", stuck,
			"sign_errors", st.SignErrors, "propose_errors", st.ProposeErrors, "last_error", st.LastError)
		l.count(func(s *LoopStats) { s.WedgeReleases++ })
	}
	l.markDead(epoch)
	l.wedgeEpoch = epoch
	l.wedgeSince = -1
	rctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	defer cancel()
	if err := l.cfg.Lease.Release(rctx); err != nil {
		l.noteErr(err)
		l.log.Warn("releasing the wedged lease failed", "epoch", epoch, "err", err)
	}
	kick(l.kickTk)
}
