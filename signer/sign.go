package signer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/signer/chain"
)

// The signing pipeline (see DESIGN.md, "The commit path"). While this device holds the
// lease, submissions made to it (Add: local ones, and forwarded ones the node hands
// in) queue here; the signer takes the oldest pending intents of the applied queue
// (intents that reached the log while no holder was reachable) followed by queued
// submissions, signs them into one commit on the predicted head — the last commit
// this hold has in flight, else the applied head — and proposes it: accepted and
// signed are the same Raft round. Up to MaxInFlight commits are in flight while this
// device's own Raft node queues them (it leads Raft: its proposals are appended in
// order); a forwarded proposal is awaited before the next is signed.
//
// Never two commits for one (seq, epoch): a commit is signed once and, while its fate
// is unknown, only its own bytes are proposed again. Any refusal ends signing under
// that epoch: the loop bumps the lease to epoch+1 (a compare-and-set on its own
// record) before it signs again, which also fences every copy of the old epoch's
// commits still travelling. The commits of a hold that are refused are therefore
// bounded by those in flight when it ended.

// Outcome is what became of a submission the holder took (Add).
type Outcome struct {
	// Index is the Raft index of the entry that accepted the intent: the commit that
	// carried it, or the intents entry of an ID the log already remembers.
	Index uint64
	// Seq and Hash are the commit that signed it; Seq 0 when the ID is remembered but
	// not signed yet (it waits in the log's pending queue: wait for it there).
	Seq  uint64
	Hash [chain.HashSize]byte
	// Duplicate: the ID was submitted before; this is the original result.
	Duplicate bool
	// Err is set when this hold did not sign it: ErrNotHolder (the hold ended before
	// it was signed: submit it elsewhere) or ErrStopped.
	Err error
}

// Ticket is a submission queued with the holder. Done is closed once Outcome is set.
type Ticket struct {
	done chan struct{}
	out  Outcome
	dup  bool
}

// Done is closed once the outcome is known.
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Outcome returns the outcome; valid once Done is closed.
func (t *Ticket) Outcome() Outcome { return t.out }

func doneTicket(o Outcome) *Ticket {
	t := &Ticket{done: make(chan struct{}), out: o}
	close(t.done)
	return t
}

// queued is one submission waiting to be signed (or in a commit in flight).
type queued struct {
	in      intentlog.Intent
	tickets []*Ticket
}

func (q *queued) finish(o Outcome) {
	for _, t := range q.tickets {
		t.out = o
		t.out.Duplicate = o.Duplicate || t.dup
		close(t.done)
	}
	q.tickets = nil
}

// Defaults of the pipeline.
const (
	// DefaultMaxInFlight bounds the commits one hold has proposed and not yet seen
	// applied locally. One: the next commit is built once the last one applied, and
	// carries everything that arrived meanwhile. Fewer, larger commits mean fewer
	// Raft entries and log writes per intent; with 8 (the default until issue 23),
	// the load bench's 16 and 64 clients signed 13-26 % fewer intents per second
	// through the socket API at a higher p99 (docs/BENCHMARKS.md).
	DefaultMaxInFlight = 1
	// DefaultMaxQueued bounds the submissions waiting at the holder (beyond it, Add
	// answers ErrBacklog).
	DefaultMaxQueued = 65536
)

// ErrNotHolder: this device does not hold the lease (or the hold ended before the
// submission was signed): submit it elsewhere.
var ErrNotHolder = errors.New("signer: this device does not hold the lease")

// ErrBacklog: too many submissions wait at the holder.
var ErrBacklog = errors.New("signer: too many submissions wait to be signed")

// ErrStopped: the loop stopped before the submission was signed.
var ErrStopped = errors.New("signer: loop stopped")

// intake is the holder's queue of submissions.
type intake struct {
	mu    sync.Mutex
	queue []*queued          // not yet in a commit, oldest first
	byID  map[string]*queued // queued or in a commit in flight
}

// Holding reports whether this device may sign now (the lease says so, the local
// replica shows the hold, and the epoch was not given up).
func (l *Loop) Holding() bool { return l.HoldingIn(l.cfg.Log.View()) }

// HoldingIn is Holding as of view v: a caller that reports v's lease record beside it
// (a node's State) says "held" only with a record that names this device.
func (l *Loop) HoldingIn(v intentlog.View) bool { return l.canSign(v) != 0 }

// Add hands a validated intent to the holder's queue. It answers at once with a
// finished Ticket when the log already remembers the ID (Duplicate), and
// ErrNotHolder when this device does not hold the lease. Otherwise the Ticket is
// done once the commit that signs the intent was applied (or the hold ended without
// signing it: Outcome.Err). Concurrent Adds of one ID share its fate.
func (l *Loop) Add(in intentlog.Intent) (*Ticket, error) {
	if !l.knobs().SkipValidation {
		// The apply's own rule: an intent it refuses never reaches a commit.
		if err := intentlog.ValidateIntentIn(l.cfg.Log.View().ChainFormat(), in); err != nil {
			return nil, err
		}
	}
	if !l.Holding() {
		return nil, ErrNotHolder
	}
	if t, ok, err := l.remembered(in.ID); err != nil || ok {
		return t, err
	}
	l.in.mu.Lock()
	if q := l.in.byID[in.ID]; q != nil {
		t := &Ticket{done: make(chan struct{}), dup: true}
		q.tickets = append(q.tickets, t)
		l.in.mu.Unlock()
		return t, nil
	}
	if len(l.in.queue) >= l.cfg.MaxQueued {
		l.in.mu.Unlock()
		return nil, ErrBacklog
	}
	t := &Ticket{done: make(chan struct{})}
	q := &queued{in: in, tickets: []*Ticket{t}}
	l.in.queue = append(l.in.queue, q)
	l.in.byID[in.ID] = q
	l.in.mu.Unlock()
	stages.Mark(stages.Queued, 0, 0, 0)
	kick(l.kickSig)
	return t, nil
}

// remembered returns a finished ticket when the applied log remembers id.
func (l *Loop) remembered(id string) (*Ticket, bool, error) {
	st, ok, err := l.cfg.Log.IntentStatus(id)
	if err != nil || !ok {
		return nil, false, err
	}
	o := Outcome{Index: st.Index, Seq: st.Seq, Duplicate: true}
	if st.Seq > 0 {
		if raw, err := l.cfg.Log.Commit(st.Seq); err == nil {
			o.Hash = chain.Hash(raw)
		}
	}
	return doneTicket(o), true, nil
}

// failQueued ends every submission not yet in a commit with err.
func (l *Loop) failQueued(err error) {
	l.in.mu.Lock()
	q := l.in.queue
	l.in.queue = nil
	for _, x := range q {
		delete(l.in.byID, x.in.ID)
	}
	l.in.mu.Unlock()
	for _, x := range q {
		x.finish(Outcome{Err: err})
	}
}

// inflight is a commit this hold signed and proposed, until the local replica has
// applied it or it can no longer apply.
type inflight struct {
	raw     []byte
	hash    [chain.HashSize]byte
	seq     uint64
	epoch   uint64
	pending []string           // IDs of the applied queue's intents it names
	pendOps []intentlog.Intent // those intents
	carried []*queued          // the submissions it carries
	// alsoSigns are queued submissions whose ID reached the applied queue meanwhile:
	// the commit signs them as pending intents.
	alsoSigns []*queued
	index     uint64 // Raft index once accepted

	proposing bool          // a proposal of it is running
	enq       chan struct{} // closed once this node's Raft queued that proposal
	done      chan struct{} // closed when that proposal returns
	res       intentlog.Result
	err       error

	applied   bool          // accepted (by an answer, or the local chain holds it)
	refused   bool          // the leader's apply refused it (an answer)
	refusedAt uint64        // the index of the entry whose apply refused it
	unsure    bool          // the last proposal's outcome is unknown: propose it again
	lastSent  time.Duration // mono of the last proposal (re-proposals wait a tick)

	content  *intentlog.Result // the apply refused it for its content (refused.go)
	analysed bool              // its offending ops were answered and dropped

	// firstCarried is the ID of the first submission it carried, kept for
	// firstStatus once its submissions were answered (a late answer, collectLate).
	firstCarried string
}

// signer is the signing goroutine's state (owned by it).
type signer struct {
	flight []*inflight
	// late are commits the local replica showed applied while their proposal was
	// still running: they left flight, and their answer, when it comes, is still
	// compared with the local chain (collectLate).
	late      []*inflight
	stopEpoch uint64 // a commit was refused under this epoch: sign nothing more under it
	answered  chan struct{}
	bumped    bool          // the loop moved to a next epoch once
	lastBump  time.Duration // mono of that move
	// revClockWait: the loop said it waits for the cluster's clock (errNoRevClock).
	revClockWait bool
}

func (l *Loop) signLoop(ctx context.Context) {
	s := &signer{answered: make(chan struct{}, 1)}
	defer func() {
		// Stopped: nothing queued will be signed by this loop. In-flight commits may
		// still apply; their submitters see ErrStopped and resubmit (the IDs dedupe).
		l.failQueued(ErrStopped)
		for _, c := range s.flight {
			for _, q := range c.carried {
				q.finish(Outcome{Err: ErrStopped})
			}
		}
	}()
	var idle <-chan struct{} // never fires
	suspect := false         // the last watch wakeup changed nothing (a closed log?)
	for {
		watch := l.cfg.Log.Watch() // before reading: no wakeup lost
		applied := l.cfg.Log.View().AppliedIndex
		r := l.step(ctx, s)
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
		timer, disarm := l.arm(l.cfg.Tick)
		woke := false
		select {
		case <-ctx.Done():
		case <-watch:
			woke = true
		case <-l.kickSig:
		case <-s.answered:
		case <-timer:
		}
		disarm()
		suspect = woke && l.cfg.Log.View().AppliedIndex == applied
	}
}

// Result of one signer step.
type stepResult int

const (
	stepAgain stepResult = iota // made progress: look again at once
	stepWait                    // nothing to do until the log, the lease or an answer changes
	stepRetry                   // failed: retry at the next tick even if nothing changes
)

// canSign reports the epoch this device may sign under now, or 0.
func (l *Loop) canSign(v intentlog.View) uint64 {
	epoch := l.cfg.Lease.Epoch()
	if epoch == 0 || epoch <= l.deadEpoch.Load() || !l.cfg.Lease.Holds() || l.unhealthy() != nil {
		return 0
	}
	// After winning a claim, build only once the local replica shows it.
	if v.Lease.Holder != l.cfg.Self || v.Lease.Epoch != epoch {
		return 0
	}
	// Only on a chain whose identity the replicated state fixes, and only ours: a
	// device holding another chain's key never signs (the apply would refuse it).
	if v.Genesis.Index == 0 || v.Chain != l.did {
		return 0
	}
	return epoch
}

func (l *Loop) stillHolds(epoch uint64) bool {
	return l.cfg.Lease.Holds() && l.cfg.Lease.Epoch() == epoch && epoch > l.deadEpoch.Load() && l.unhealthy() == nil
}

func (l *Loop) step(ctx context.Context, s *signer) stepResult {
	l.collect(s)
	v := l.cfg.Log.View()
	l.analyse(s, v)
	l.resolve(s, v)
	mono := l.cfg.Clock.Mono()
	queued, inFlight := l.queuedLen(), len(s.flight)
	l.count(func(st *LoopStats) {
		st.Steps++
		st.PendingAtLastRun, st.Queued, st.InFlight = v.Pending, queued, inFlight
	})
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
		l.failQueued(ErrNotHolder)
		return stepWait
	}
	if s.stopEpoch == epoch {
		// A commit was refused under this epoch: move to the next one before signing
		// again (never a second commit for a (seq, epoch) already signed); after a
		// refusal for content, once its offending ops are dropped.
		if s.analysing() {
			return stepWait
		}
		return l.bump(ctx, s, epoch)
	}
	if l.queuedLen() == 0 && v.Pending <= s.pendingInFlight() {
		l.wedgeSince = -1
	} else {
		if l.wedgeSince < 0 {
			l.wedgeSince = mono
		}
		if timeout := l.wedgeTimeout(v); mono-l.wedgeSince >= timeout {
			l.releaseWedged(ctx, epoch, v, mono-l.wedgeSince)
			return stepWait
		}
	}
	if u := s.firstUnsure(); u != nil {
		// Proposals whose outcome is unknown go again, as they are and in order
		// (each once the one before it is queued or answered), before anything new
		// is signed; at the tick, never in a spin.
		if !l.stillHolds(epoch) {
			return stepWait
		}
		for _, c := range s.flight {
			if c.proposing && !c.enqueued() {
				break // the one before is on its way: keep the order
			}
			if !c.unsure || c.proposing {
				continue
			}
			if mono-c.lastSent < l.cfg.Tick {
				break
			}
			l.count(func(st *LoopStats) { st.Reproposed++ })
			if !l.propose(ctx, s, c) {
				return stepRetry
			}
			break
		}
		return stepRetry
	}
	if len(s.flight) >= l.maxInFlight(v) || s.awaiting() {
		return stepWait
	}
	c, err := l.build(s, v, epoch)
	if err != nil {
		l.noteErr(err)
		l.log.Error("building a commit failed", "err", err)
		return stepRetry
	}
	if c == nil {
		return stepWait
	}
	if !l.stillHolds(epoch) { // right before signing
		l.requeue(c.carried)
		return stepWait
	}
	cm := chain.Commit{Seq: c.seq, Epoch: epoch, Signer: l.cfg.Self, Ops: Ops(c.ops()), Time: l.stamp()}
	if prev := s.headBefore(v); prev.Seq > 0 {
		cm.Prev = append([]byte(nil), prev.Hash[:]...)
	}
	stages.Mark(stages.SignStart, 0, 0, 0)
	raw, err := l.signCommit(v, cm) // sign_format.go: the chain's format
	stages.Mark(stages.Signed, 0, 0, 0)
	if errors.Is(err, errNoRevClock) {
		l.requeue(c.carried)
		if !s.revClockWait {
			s.revClockWait = true
			l.log.Info("the holder waits for the cluster's clock before it signs", "seq", c.seq, "epoch", epoch)
		}
		return stepRetry
	}
	if err != nil {
		l.requeue(c.carried)
		l.count(func(st *LoopStats) { st.SignErrors++ })
		l.noteErr(err)
		l.log.Error("signing a commit failed", "seq", c.seq, "epoch", epoch, "err", err)
		return stepRetry
	}
	c.raw, c.hash = raw, chain.Hash(raw)
	if !l.stillHolds(epoch) { // right before proposing
		// Signed but never proposed: it cannot apply, nothing else holds it.
		l.requeue(c.carried)
		return stepWait
	}
	s.flight = append(s.flight, c)
	l.count(func(st *LoopStats) { st.CommitsSigned++ })
	if !l.propose(ctx, s, c) {
		return stepRetry
	}
	return stepAgain
}

// build takes the next commit's ops: the applied queue's pending intents not named by
// a commit in flight, then queued submissions, within the batch limits. nil when
// there is nothing to sign.
func (l *Loop) build(s *signer, v intentlog.View, epoch uint64) (*inflight, error) {
	named := s.namedPending()
	var pend []intentlog.Intent
	if v.Pending > len(named) {
		all, err := l.cfg.Log.Pending(len(named)+l.cfg.MaxBatchCount, 0)
		if err != nil {
			return nil, fmt.Errorf("read pending intents: %w", err)
		}
		for _, in := range all {
			if !named[in.ID] {
				pend = append(pend, in)
			}
		}
	}
	c := &inflight{seq: s.headBefore(v).Seq + 1, epoch: epoch}
	var size int64
	fits := func(in intentlog.Intent) bool {
		n := len(c.pending) + len(c.carried)
		sz := int64(len(in.Path) + len(in.Value))
		if n >= l.cfg.MaxBatchCount || (n > 0 && size+sz > l.cfg.MaxBatchBytes) {
			return false
		}
		size += sz
		return true
	}
	inCommit := map[string]bool{}
	var pendOps []intentlog.Intent
	for _, in := range pend {
		if !fits(in) {
			break
		}
		c.pending = append(c.pending, in.ID)
		pendOps = append(pendOps, in)
		inCommit[in.ID] = true
	}
	c.pendOps = pendOps
	l.in.mu.Lock()
	defer l.in.mu.Unlock()
	taken := 0
	for _, q := range l.in.queue {
		if inCommit[q.in.ID] {
			// Already waiting in the applied queue (an intents entry with this ID
			// applied after it was added): the commit signs it as a pending intent.
			c.alsoSigns = append(c.alsoSigns, q)
			taken++
			continue
		}
		if !fits(q.in) {
			break
		}
		c.carried = append(c.carried, q)
		inCommit[q.in.ID] = true
		taken++
	}
	l.in.queue = append([]*queued(nil), l.in.queue[taken:]...)
	if len(c.pending)+len(c.carried) == 0 {
		return nil, nil
	}
	return c, nil
}

func (c *inflight) ops() []intentlog.Intent {
	out := make([]intentlog.Intent, 0, len(c.pendOps)+len(c.carried))
	out = append(out, c.pendOps...)
	for _, q := range c.carried {
		out = append(out, q.in)
	}
	return out
}

// requeue puts submissions taken for a commit that was never proposed back at the
// front of the queue.
func (l *Loop) requeue(qs []*queued) {
	if len(qs) == 0 {
		return
	}
	l.in.mu.Lock()
	l.in.queue = append(append([]*queued(nil), qs...), l.in.queue...)
	l.in.mu.Unlock()
}

func (l *Loop) queuedLen() int {
	l.in.mu.Lock()
	defer l.in.mu.Unlock()
	return len(l.in.queue)
}

// propose starts a proposal of c. The next commit may follow once this device's Raft
// node has queued it (then it is appended behind it) or it returned; until then
// awaiting holds the signer back (a forwarded proposal is awaited, so that commits
// reach the log in order). It reports false when ctx is done.
func (l *Loop) propose(ctx context.Context, s *signer, c *inflight) bool {
	if ctx.Err() != nil {
		return false
	}
	c.proposing, c.unsure = true, false
	c.lastSent = l.cfg.Clock.Mono()
	// The callback closes this proposal's channel, not c.enq as it is when it runs:
	// a proposal answered late (forwarded, its caller gone) ran it after c was
	// proposed again, a data race and the wrong channel closed (go test -race,
	// testnet TestIntegrityFullDisk).
	enq := make(chan struct{})
	c.done, c.enq = make(chan struct{}), enq
	var once sync.Once
	pctx, cancel := context.WithTimeout(ctx, l.commitTimeout())
	pctx = intentlog.WithEnqueued(pctx, func() {
		once.Do(func() { close(enq) })
		kick(s.answered)
	})
	l.count(func(st *LoopStats) { st.CommitsProposed++ })
	go func() {
		defer cancel()
		res, err := l.cfg.Log.Propose(pctx, intentlog.CommitEntry{Raw: c.raw})
		c.res, c.err = res, err
		close(c.done)
		kick(s.answered)
	}()
	return true
}

// commitTimeout bounds a commit proposal: a third of the lease TTL (the proposal runs
// beside the loop, which never waits for it; a shorter bound only turns slow answers
// into unknown outcomes and copies of the same commit in the log), at least
// CallTimeout.
func (l *Loop) commitTimeout() time.Duration {
	ttl := time.Duration(l.cfg.Log.View().Lease.TTL) * time.Millisecond
	return max(l.cfg.CallTimeout, ttl/3)
}

// collect takes the answers of finished proposals.
func (l *Loop) collect(s *signer) {
	l.collectLate(s)
	for _, c := range s.flight {
		if !c.proposing {
			continue
		}
		select {
		case <-c.done:
		default:
			continue
		}
		c.proposing = false
		res, err := c.res, c.err
		switch {
		case err != nil:
			// Outcome unknown: c may still apply. Until the local replica shows that
			// it cannot, the only commit proposed for its seq is c itself, again.
			c.unsure = true
			l.count(func(st *LoopStats) { st.ProposeErrors++ })
			l.noteErr(err)
			l.log.Warn("proposing a commit failed (outcome unknown)", "seq", c.seq, "epoch", c.epoch, "err", err)
		case res.Accepted:
			c.applied, c.index = true, res.Index
			l.count(func(st *LoopStats) {
				st.CommitsAccepted++
				st.LastSigned, st.LastSignedEpoch = max(st.LastSigned, c.seq), c.epoch
			})
			l.finishApplied(c)
		case res.Head.Seq >= c.seq && res.Head.Seq == c.seq && res.Head.Hash == c.hash:
			// A second copy of a commit that applied already.
			c.applied = true
			l.finishApplied(c)
		case l.settleLocally(c, res):
			// Maybe a second copy of a commit that applied: the local chain decides.
			// A fence answer still ends signing under that epoch.
			l.count(func(st *LoopStats) { st.SettledLocally++ })
			l.log.Info("commit refused at or below the head: settling it from the local chain", "seq", c.seq,
				"epoch", c.epoch, "reason", res.Reason, "head_seq", res.Head.Seq)
			if res.Reason == intentlog.ReasonEpochMismatch || res.Reason == intentlog.ReasonNotHolder {
				s.stopEpoch = max(s.stopEpoch, c.epoch)
				l.markDead(c.epoch)
			}
		default:
			c.refused, c.refusedAt = true, res.Index
			l.count(func(st *LoopStats) { st.CommitsRejected++; st.Rejections[res.Reason]++ })
			if !FenceReason(res.Reason) {
				if !l.knobs().ResignRefused {
					l.contentRefused(s, c, res)
					continue
				}
				l.count(func(st *LoopStats) { st.ContentRefused[res.Reason]++ }) // counted, handled the old way
			}
			s.stopEpoch = max(s.stopEpoch, c.epoch)
			if res.Reason == intentlog.ReasonEpochMismatch || res.Reason == intentlog.ReasonNotHolder {
				// The epoch moved on: this hold is over whatever the lease thinks.
				l.markDead(c.epoch)
				l.count(func(st *LoopStats) { st.StepDowns++ })
				l.log.Warn("commit refused: the lease epoch moved on; stepping down", "seq", c.seq, "epoch", c.epoch,
					"reason", res.Reason, "lease_holder", res.Lease.Holder, "lease_epoch", res.Lease.Epoch)
				kick(l.kickTk)
			} else {
				err := fmt.Errorf("commit seq %d epoch %d refused: %s", c.seq, c.epoch, res.Reason)
				l.noteErr(err)
				l.log.Warn("commit refused; moving to the next epoch before signing again", "seq", c.seq,
					"epoch", c.epoch, "reason", res.Reason, "head_seq", res.Head.Seq)
			}
		}
	}
}

// collectLate takes the answers to proposals of commits the local replica showed
// applied before the answer came (resolve): an answer that refuses the commit (and
// is not the answer to a second copy, settleLocally) contradicts the local chain.
// Before, such an answer was never read, and whether a divergence was reported
// depended on which came first: the answer or the local apply.
func (l *Loop) collectLate(s *signer) {
	kept := s.late[:0]
	for _, c := range s.late {
		select {
		case <-c.done:
		default:
			kept = append(kept, c)
			continue
		}
		c.proposing = false
		res := c.res
		if c.err != nil || res.Accepted || res.Head.Seq == c.seq && res.Head.Hash == c.hash || l.settleLocally(c, res) {
			continue
		}
		c.refused, c.refusedAt = true, res.Index
		l.count(func(st *LoopStats) { st.CommitsRejected++; st.Rejections[res.Reason]++ })
		s.stopEpoch = max(s.stopEpoch, c.epoch)
		if res.Reason == intentlog.ReasonEpochMismatch || res.Reason == intentlog.ReasonNotHolder {
			l.markDead(c.epoch)
		}
		l.refusedYetApplied(c)
	}
	clear(s.late[len(kept):])
	s.late = kept
}

// finishApplied answers the submitters of an applied commit.
func (l *Loop) finishApplied(c *inflight) {
	o := Outcome{Index: c.index, Seq: c.seq, Hash: c.hash}
	l.in.mu.Lock()
	for _, q := range c.carried {
		delete(l.in.byID, q.in.ID)
	}
	for _, q := range c.alsoSigns {
		delete(l.in.byID, q.in.ID)
	}
	l.in.mu.Unlock()
	stages.Mark(stages.Answered, c.index, c.index, 0)
	for _, q := range c.carried {
		q.finish(o)
	}
	for _, q := range c.alsoSigns {
		// Signed as a pending intent: its index is its intents entry's.
		oo := o
		if st, ok, err := l.cfg.Log.IntentStatus(q.in.ID); err == nil && ok {
			oo.Index = st.Index
		}
		oo.Duplicate = true
		q.finish(oo)
	}
	c.carried, c.alsoSigns = nil, nil
}

// resolve settles the commits in flight against the local replica: one the local
// chain holds at its seq has applied; one that cannot apply any more (the head is at
// or past its seq with another commit, or the lease moved to another epoch: any
// later apply runs on a state descending from this one, where the fence refuses it)
// is void, and its submissions go back to the queue (or to their callers when the
// hold is over). Commits drop out of flight once resolved locally.
func (l *Loop) resolve(s *signer, v intentlog.View) {
	kept := s.flight[:0]
	var void []*queued
	for _, c := range s.flight {
		switch {
		case c.content != nil && !c.analysed:
			kept = append(kept, c) // its offending ops are not dropped yet (analyse)
		case v.Head.Seq >= c.seq:
			h := v.Head.Hash
			if v.Head.Seq != c.seq {
				raw, err := l.cfg.Log.Commit(c.seq)
				if err != nil {
					kept = append(kept, c) // unreadable now: look again later
					continue
				}
				h = chain.Hash(raw)
			}
			if h == c.hash {
				if c.refused {
					l.refusedYetApplied(c)
				}
				if !c.applied {
					if c.proposing {
						// Its answer is still to come: a refusal would contradict the
						// local chain (collectLate).
						if len(c.carried) > 0 {
							c.firstCarried = c.carried[0].in.ID
						}
						s.late = append(s.late, c)
					}
					c.applied = true
					l.count(func(st *LoopStats) {
						st.CommitsAccepted++
						st.LastSigned, st.LastSignedEpoch = max(st.LastSigned, c.seq), c.epoch
					})
					if st, ok, err := l.firstStatus(c); err == nil && ok {
						c.index = st.Index
					}
					l.finishApplied(c)
				}
				continue
			}
			if c.applied {
				l.diverged(fmt.Errorf("the leader applied commit seq %d epoch %d, but the local replica holds another commit at that seq: this replica's state differs from the others'", c.seq, c.epoch))
			}
			void = append(void, l.voided(c)...)
		case v.Lease.Epoch != c.epoch:
			void = append(void, l.voided(c)...)
		default:
			kept = append(kept, c)
		}
	}
	s.flight = kept
	if len(void) > 0 {
		l.reconsider(void)
	}
}

// diverged reports a contradiction between the local replica and the leader.
func (l *Loop) diverged(err error) {
	l.noteErr(err)
	l.log.Error("replica diverged", "err", err)
	if l.cfg.Diverged != nil {
		l.cfg.Diverged(err)
	}
}

func (l *Loop) firstStatus(c *inflight) (intentlog.IntentResult, bool, error) {
	if len(c.carried) > 0 {
		return l.cfg.Log.IntentStatus(c.carried[0].in.ID)
	}
	if c.firstCarried != "" {
		return l.cfg.Log.IntentStatus(c.firstCarried)
	}
	return intentlog.IntentResult{}, false, nil
}

// voided counts a signed commit that can no longer apply and returns its carried
// submissions.
func (l *Loop) voided(c *inflight) []*queued {
	l.count(func(st *LoopStats) { st.SignedRefused++ })
	l.log.Info("signed commit will never apply (voided)", "seq", c.seq, "epoch", c.epoch)
	q := append(c.carried, c.alsoSigns...)
	c.carried, c.alsoSigns = nil, nil
	return q
}

// reconsider returns the submissions of void commits to the front of the queue,
// unless the log meanwhile remembers their IDs (then that is their outcome).
func (l *Loop) reconsider(qs []*queued) {
	var back []*queued
	for _, q := range qs {
		if t, ok, err := l.remembered(q.in.ID); err == nil && ok {
			l.in.mu.Lock()
			delete(l.in.byID, q.in.ID)
			l.in.mu.Unlock()
			q.finish(t.Outcome())
			continue
		}
		back = append(back, q)
	}
	l.requeue(back)
}

// bump moves this hold to the next epoch after a refusal; a second move within a
// tick waits for the tick.
func (l *Loop) bump(ctx context.Context, s *signer, epoch uint64) stepResult {
	if mono := l.cfg.Clock.Mono(); s.bumped && mono-s.lastBump < l.cfg.Tick {
		return stepRetry
	}
	b, ok := l.cfg.Lease.(bumper)
	if !ok {
		// A lease that cannot bump: give the hold up instead.
		l.markDead(epoch)
		kick(l.kickTk)
		return stepWait
	}
	bctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	defer cancel()
	ne, err := b.Bump(bctx)
	if err != nil {
		l.noteErr(err)
		l.log.Warn("moving to the next epoch after a refused commit failed", "epoch", epoch, "err", err)
		return stepRetry
	}
	s.bumped, s.lastBump = true, l.cfg.Clock.Mono()
	l.count(func(st *LoopStats) { st.Bumps++ })
	l.log.Info("moved to the next epoch after a refused commit", "from", epoch, "to", ne)
	return stepAgain
}

// bumper is an optional capability of a Lease (*election.Lease has it): claim the next
// epoch over this device's own hold.
type bumper interface {
	Bump(ctx context.Context) (uint64, error)
}

var _ bumper = (*election.Lease)(nil)

func (s *signer) firstUnsure() *inflight {
	for _, c := range s.flight {
		if c.unsure {
			return c
		}
	}
	return nil
}

// awaiting: the last commit's proposal was forwarded (this node does not lead Raft)
// and has not answered: the next one waits, so that they reach the log in order.
func (s *signer) awaiting() bool {
	if len(s.flight) == 0 {
		return false
	}
	c := s.flight[len(s.flight)-1]
	return c.proposing && !c.enqueued()
}

func (c *inflight) enqueued() bool {
	select {
	case <-c.enq:
		return true
	default:
		return false
	}
}

// headBefore is the head the next commit builds on: the last in flight, else the
// applied head.
func (s *signer) headBefore(v intentlog.View) intentlog.Head {
	if n := len(s.flight); n > 0 {
		c := s.flight[n-1]
		return intentlog.Head{Seq: c.seq, Hash: c.hash, Epoch: c.epoch}
	}
	return v.Head
}

// namedPending is the set of pending intents named by commits in flight.
func (s *signer) namedPending() map[string]bool {
	m := map[string]bool{}
	for _, c := range s.flight {
		for _, id := range c.pending {
			m[id] = true
		}
	}
	return m
}

func (s *signer) pendingInFlight() int {
	n := 0
	for _, c := range s.flight {
		n += len(c.pending)
	}
	return n
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
		l.log.Error("wedged: intents wait but no commit applied; releasing the lease",
			"epoch", epoch, "pending", v.Pending, "queued", l.queuedLen(), "head_seq", v.Head.Seq, "stuck_for", stuck,
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
