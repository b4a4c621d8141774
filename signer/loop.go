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
	"github.com/batonhq/baton/internal/knobs"
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
	// IntentStatus reports what the applied log remembers of an intent ID (ok false:
	// nothing): the index of the entry that accepted it and, once signed, its seq.
	IntentStatus(id string) (intentlog.IntentResult, bool, error)
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
	// RevClock, if set, is the time an atproto commit's rev is taken from (the
	// node's: the cluster's clock, so that one fast device does not sign revs a
	// relay refuses as in the future); false while it is not known (the loop then
	// signs no atproto commit, and tries again at the next tick). Defaults to
	// Clock.Now.
	RevClock func() (time.Time, bool)
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
	// MaxInFlight bounds the commits one hold has proposed and not yet seen applied
	// locally (only while this device's own Raft node queues them). Optional,
	// default DefaultMaxInFlight.
	MaxInFlight int
	// MaxQueued bounds the submissions waiting at the holder. Optional, default
	// DefaultMaxQueued.
	MaxQueued int
	// WedgeTimeout: a holder with pending intents none of whose commits applied for
	// this long releases the lease. Optional, defaults to the lease record's TTL
	// (DefaultWedgeTimeout if the record has none).
	WedgeTimeout time.Duration
	// ReleaseTimeout bounds the Release on a graceful stop. Optional, defaults to
	// DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// Healthy, if set, is asked before every lease write and every signature: while
	// it returns an error (a storage fault, a replica whose state differs from the
	// others', a chain identity mismatch) the loop neither claims, renews nor signs,
	// and gives up a lease it holds.
	Healthy func() error
	// Diverged, if set, is told when the local replica contradicts the leader about
	// one of this loop's commits (the leader refused a commit the local replica
	// applied, or the other way round): this replica's state differs from the
	// others'. The node raises its alarm (and Healthy then fails).
	Diverged func(error)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Knobs are test hooks (nil in production; see package internal/knobs).
	Knobs *knobs.Signer
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
	case c.Tick < 0 || c.CallTimeout < 0 || c.MaxBatchCount < 0 || c.MaxBatchBytes < 0 || c.WedgeTimeout < 0 ||
		c.ReleaseTimeout < 0 || c.MaxInFlight < 0 || c.MaxQueued < 0:
		return fmt.Errorf("%w: negative duration or limit", ErrBadConfig)
	}
	if ls, ok := c.Lease.(interface{ Self() string }); ok && ls.Self() != c.Self {
		// The apply accepts commits only from the lease holder: a mismatch would sign
		// commits every replica refuses.
		return fmt.Errorf("%w: lease is for %q but Self is %q", ErrBadConfig, ls.Self(), c.Self)
	}
	if err := CheckChainDID(c.Key.DID()); err != nil {
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
	if c.MaxInFlight == 0 && c.Knobs != nil {
		c.MaxInFlight = c.Knobs.MaxInFlight // a test's pipeline depth, where a node has none
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultMaxQueued
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
	// CommitsSigned counts commits signed; SignedRefused those of them that will
	// never apply (refused, or voided when the epoch moved on with them in flight);
	// Bumps moves to the next epoch after a refusal; Reproposed re-sends of a commit
	// whose proposal had an unknown outcome (the same bytes, never re-signed).
	CommitsSigned uint64
	SignedRefused uint64
	Bumps         uint64
	Reproposed    uint64
	// SettledLocally counts refusals whose head was at or past the commit's seq,
	// settled from the local chain instead of believed (refused.go, settleLocally):
	// the answers to resent copies of commits that applied, among others; and
	// refused commits the local chain shows applied by a later copy
	// (refusedYetApplied).
	SettledLocally uint64
	// Queued and InFlight are the submissions waiting at this holder and the
	// commits it has proposed and not yet seen applied locally, at the last step.
	Queued   int
	InFlight int

	// ContentRefused counts the commits the apply refused for their content (not the
	// fence nor a race on the head), by reason: a defect, 0 in any operation.
	ContentRefused map[intentlog.Reason]uint64
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
	did string // the chain key's did:key

	running atomic.Bool
	// parked counts goroutines waiting with an armed timer that has not fired (tests
	// wait for both before advancing a ManualClock, so that no timer is armed late).
	parked  atomic.Int32
	kickSig chan struct{} // lease state may have changed: re-check signing
	kickTk  chan struct{} // run a lease tick now

	mu    sync.Mutex
	stats LoopStats

	// in is the holder's queue of submissions (Add).
	in intake

	// Signer state, owned by the signing goroutine.
	deadEpoch  atomic.Uint64 // never sign at or below this epoch again
	lastHead   uint64        // head seq last seen (progress)
	wedgeSince time.Duration // mono when the current no-progress stretch began; -1: none
	wedgeEpoch uint64        // the epoch given up as wedged (its release is retried while held)

	defect atomic.Pointer[error] // the first commit refused for its content (Defect)
	unfit  atomic.Pointer[error] // a content refusal no op explains: never sign again (Unfit)
}

// NewLoop validates cfg and returns a Loop. It does not start it.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Loop{
		cfg:        cfg,
		did:        cfg.Key.DID(),
		log:        cfg.Logger.With("component", "signer"),
		kickSig:    make(chan struct{}, 1),
		kickTk:     make(chan struct{}, 1),
		stats:      LoopStats{Rejections: map[intentlog.Reason]uint64{}, ContentRefused: map[intentlog.Reason]uint64{}},
		in:         intake{byID: map[string]*queued{}},
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
	s.ContentRefused = make(map[intentlog.Reason]uint64, len(l.stats.ContentRefused))
	for k, v := range l.stats.ContentRefused {
		s.ContentRefused[k] = v
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

// unhealthy returns Healthy's error (nil without a Healthy func), or Unfit's.
func (l *Loop) unhealthy() error {
	if err := l.Unfit(); err != nil {
		return err
	}
	if l.cfg.Healthy == nil {
		return nil
	}
	return l.cfg.Healthy()
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
	wasHeld, tickedOK := false, false
	for {
		seen := l.cfg.Log.View().Lease // before the tick: a change during it is not lost
		cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
		var held bool
		var err error
		if herr := l.unhealthy(); herr != nil {
			// Never claim or renew on a replica that cannot be trusted; give a held
			// lease up so that a healthy device takes over at once.
			if l.cfg.Lease.Holds() {
				if rerr := l.cfg.Lease.Release(cctx); rerr == nil {
					l.log.Warn("released the lease: this device is unhealthy", "why", herr)
				}
			}
		} else {
			held, err = l.cfg.Lease.RenewOrClaim(cctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.count(func(s *LoopStats) { s.Ticks++; s.HeldAtLastTick = held })
		if err != nil {
			l.count(func(s *LoopStats) { s.TickErrors++ })
			l.noteErr(err)
			// Until a first tick succeeds the cluster is still forming (no leader
			// yet): that is expected, not worth a warning.
			level := slog.LevelWarn
			if !tickedOK {
				level = slog.LevelDebug
			}
			l.log.Log(ctx, level, "lease tick failed", "err", err, "holds", held)
		} else {
			tickedOK = true
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

// knobs returns the test knobs (zero: production).
func (l *Loop) knobs() knobs.Signer {
	if l.cfg.Knobs == nil {
		return knobs.Signer{}
	}
	return *l.cfg.Knobs
}
