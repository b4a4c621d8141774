package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
)

// Wait says how long Submit waits.
type Wait int

const (
	// WaitCommitted returns once the intent is in the Raft log (committed and applied
	// on the leader): it will be signed exactly once, given a surviving quorum.
	WaitCommitted Wait = iota
	// WaitSigned returns once the commit containing the intent is applied locally.
	WaitSigned
)

// Group commit bounds: one IntentsEntry carries at most this many intents and bytes
// (path + value) of concurrent submissions.
const (
	MaxGroupCount       = 1024
	MaxGroupBytes int64 = 4 << 20
)

// SubmitResult is the outcome of Submit. Seq and Hash (hex) are set once signed
// (always with WaitSigned). Duplicate reports an ID submitted before: the result is
// the original one.
type SubmitResult struct {
	ID        string `json:"id"`
	Index     uint64 `json:"index"`
	Seq       uint64 `json:"seq,omitempty"`
	Hash      string `json:"hash,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// ValidateIntent checks an intent with the apply's own rule (intentlog.ValidateIntent:
// the only copy of it), so that a bad one is refused before it reaches the log or a
// commit, and changes nothing. The error wraps ErrBadRequest, ErrBadPath or
// ErrTooLarge (the apply's reason bad_intent, bad_path or too_large) and carries the
// apply's sentence. It also normalises the value: a put without a value is an empty
// value, a del carries none.
func ValidateIntent(in *intentlog.Intent) error {
	return validateIn(intentlog.CommitFormatVersion, in)
}

// validateIn is ValidateIntent on a chain of commit format f: the format's own rule
// too (intentlog.ValidateIntentIn).
func validateIn(f uint64, in *intentlog.Intent) error {
	if err := intentlog.ValidateIntentIn(f, *in); err != nil {
		return intentError(err)
	}
	if in.Op == intentlog.OpPut && in.Value == nil {
		in.Value = []byte{}
	}
	if in.Op == intentlog.OpDel {
		in.Value = nil
	}
	return nil
}

// intentError maps the apply's verdict on an intent (an *intentlog.IntentError) to
// the node's error for its reason.
func intentError(err error) error {
	var ie *intentlog.IntentError
	if !errors.As(err, &ie) {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	switch ie.Reason {
	case intentlog.ReasonBadPath:
		return fmt.Errorf("%w: %s", ErrBadPath, ie.Msg)
	case intentlog.ReasonTooLarge:
		return fmt.Errorf("%w: %s", ErrTooLarge, ie.Msg)
	}
	return fmt.Errorf("%w: %s", ErrBadRequest, ie.Msg)
}

// Submit submits one intent and returns once it is in the log (WaitCommitted) or
// signed and applied locally (WaitSigned). Without a deadline on ctx,
// DefaultSubmitTimeout applies.
//
// Exactly once: the ID is the idempotency key. The replicated state remembers every
// accepted ID and its original result for at least the cluster's retention (24 h by
// default, in log time; an unsigned ID is never forgotten), so the same ID again, on
// any device, returns the original result (Duplicate set) and the intent is in the
// chain once. After any error (ErrTimeout, ErrNoQuorum, ErrStopped, a lost
// connection) submit the same ID again to learn the outcome. After the retention a
// resubmission may be a new intent.
//
// The route: on the lease holder the signer loop takes it into its next commit (one
// Raft round: accepted and signed together); elsewhere it is forwarded to the holder
// while one is known and live (and, if its outcome is unknown, sent again to it or
// settled from the log once the lease has moved: never sent another way while the
// holder may still sign it); when no holder can take it (none, lapsed, released,
// unreachable) it goes into the log as an intents entry, durable at once and signed
// by the next holder. An error after the intent left this
// node (ErrTimeout, ErrNoQuorum) means the outcome is unknown: submit the same ID
// again to learn it.
func (n *Node) Submit(ctx context.Context, in intentlog.Intent, wait Wait) (SubmitResult, error) {
	stages.Mark(stages.SubmitStart, 0, 0, 0)
	defer stages.Mark(stages.SubmitDone, 0, 0, 0)
	if err := n.validate(&in); err != nil {
		return SubmitResult{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultSubmitTimeout)
		defer cancel()
	}
	timed := n.metrics.track(in.ID, time.Now())
	out, err := n.submit(ctx, in)
	if timed && (err != nil || out.Duplicate) {
		n.metrics.untrack(in.ID) // no commit of this submission will be timed
	}
	if err != nil {
		return SubmitResult{}, fmt.Errorf("submit %q: %w", in.ID, err)
	}
	if out.Seq == 0 && wait != WaitSigned {
		return out, nil
	}
	if out.Seq == 0 {
		seq, hash, err := n.waitSigned(ctx, out.ID)
		if err != nil {
			return out, err
		}
		out.Seq, out.Hash = seq, hash
		return out, nil
	}
	if wait == WaitSigned {
		if err := n.waitHead(ctx, out.Seq); err != nil {
			return out, fmt.Errorf("wait signed %q: %w", in.ID, err)
		}
	}
	if out.Hash == "" {
		out.Hash = n.commitHash(out.Seq)
	}
	return out, nil
}

// submit routes a validated intent (see Submit) and returns its result: signed (Seq
// set) or in the log's pending queue (Seq 0).
func (n *Node) submit(ctx context.Context, in intentlog.Intent) (SubmitResult, error) {
	if st, ok, err := n.log.IntentStatus(in.ID); err != nil {
		return SubmitResult{}, err
	} else if ok {
		// A retry this replica can answer.
		return SubmitResult{ID: in.ID, Index: st.Index, Seq: st.Seq, Duplicate: true}, nil
	}
	for attempt := 0; attempt < 3; attempt++ {
		if n.loop != nil {
			out, err, done := n.viaLoop(ctx, in)
			if done {
				return out, err
			}
		}
		holder := n.forwardTarget()
		if holder == "" {
			break
		}
		out, err := n.forward(ctx, holder, in)
		switch {
		case err == nil:
			return out, nil
		case errors.Is(err, signer.ErrNotHolder):
			// Never reached the holder, or its hold ended before signing it: look
			// again (a new holder, or the log).
			n.logger.Debug("forward to the holder: not taken; routing again", "holder", shortID(holder), "id", in.ID, "err", err)
			continue
		}
		return SubmitResult{}, err
	}
	return n.viaLog(ctx, in)
}

// viaLoop hands in to this device's signer loop if it holds the lease. done is false
// when it does not (or the hold ended before in was signed): route elsewhere.
func (n *Node) viaLoop(ctx context.Context, in intentlog.Intent) (SubmitResult, error, bool) {
	t, err := n.loop.Add(in)
	switch {
	case errors.Is(err, signer.ErrNotHolder):
		return SubmitResult{}, nil, false
	case err != nil:
		return SubmitResult{}, loopError(err), true
	}
	select {
	case <-t.Done():
	case <-ctx.Done():
		return SubmitResult{}, n.unknownOutcome(), true
	case <-n.ctx.Done():
		return SubmitResult{}, ErrStopped, true
	}
	o := t.Outcome()
	switch {
	case errors.Is(o.Err, signer.ErrNotHolder):
		return SubmitResult{}, nil, false
	case errors.Is(o.Err, signer.ErrStopped):
		return SubmitResult{}, ErrStopped, true
	case o.Err != nil:
		return SubmitResult{}, loopError(o.Err), true
	}
	return outcomeResult(in.ID, o), nil, true
}

// unknownOutcome is the error for a submission whose commit is proposed but not
// answered when the caller gives up: ErrNoQuorum while no Raft leader is known,
// ErrTimeout otherwise. Either way the outcome is unknown (resubmit the same ID).
func (n *Node) unknownOutcome() error {
	if _, id := n.log.Leader(); id == "" {
		return ErrNoQuorum
	}
	return ErrTimeout
}

func outcomeResult(id string, o signer.Outcome) SubmitResult {
	r := SubmitResult{ID: id, Index: o.Index, Seq: o.Seq, Duplicate: o.Duplicate}
	if o.Seq > 0 && o.Hash != ([chain.HashSize]byte{}) {
		r.Hash = hex.EncodeToString(o.Hash[:])
	}
	return r
}

// forwardTarget is the lease holder to forward to: another device holding a lease
// that this device's policy sees as live; "" when there is none (vacant, released,
// lapsed, or this device's own record).
func (n *Node) forwardTarget() string {
	d := n.lease.Decide()
	rec := n.log.View().Lease
	if rec.Holder == "" || rec.Holder == n.id {
		return ""
	}
	switch d.Why {
	case election.WhyLive, election.WhySkew:
		return rec.Holder
	}
	return ""
}

// viaLog submits in as (part of) an intents entry through the Raft leader.
func (n *Node) viaLog(ctx context.Context, in intentlog.Intent) (SubmitResult, error) {
	s := &submission{in: in, done: make(chan struct{})}
	s.deadline, _ = ctx.Deadline()
	if err := n.batch.submit(s); err != nil {
		return SubmitResult{}, err
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return SubmitResult{}, ErrTimeout
	case <-n.ctx.Done():
		return SubmitResult{}, ErrStopped
	}
	if s.err != nil {
		return SubmitResult{}, s.err
	}
	r := s.res
	if !r.Accepted {
		return SubmitResult{}, rejection(r)
	}
	return SubmitResult{ID: in.ID, Index: r.Index, Seq: r.Seq, Duplicate: r.Duplicate}, nil
}

// waitHead waits until the local replica's head is at seq or later.
func (n *Node) waitHead(ctx context.Context, seq uint64) error {
	for {
		w := n.log.Watch()
		if n.log.View().Head.Seq >= seq {
			return nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return ErrTimeout
		case <-n.ctx.Done():
			return ErrStopped
		}
	}
}

func rejection(r intentlog.IntentResult) error {
	switch r.Reason {
	case intentlog.ReasonBadPath:
		return fmt.Errorf("%w: intent %q: %s", ErrBadPath, r.ID, r.Reason)
	case intentlog.ReasonTooLarge:
		return fmt.Errorf("%w: intent %q: %s", ErrTooLarge, r.ID, r.Reason)
	case intentlog.ReasonBadIntent, intentlog.ReasonMalformed:
		return fmt.Errorf("%w: intent %q: %s", ErrBadRequest, r.ID, r.Reason)
	case intentlog.ReasonBacklog:
		return fmt.Errorf("%w: intent %q: the pending queue (%d) or the dedupe window's cap is full", ErrBacklog, r.ID, intentlog.MaxPending)
	}
	return fmt.Errorf("%w: intent %q: %s", ErrRejected, r.ID, r.Reason)
}

// commitHash returns the hex hash of the applied commit at seq, "" when this replica
// has not applied it. Applied commits never change, so hashes are cached per seq:
// every WaitSigned caller asks again on every applied change.
func (n *Node) commitHash(seq uint64) string {
	if h, ok := n.hashes.get(seq); ok {
		return h
	}
	if n.log.View().Head.Seq < seq {
		return ""
	}
	raw, err := n.log.Commit(seq)
	if err != nil {
		return ""
	}
	h := chain.Hash(raw)
	s := hex.EncodeToString(h[:])
	n.hashes.put(seq, s)
	return s
}

// hashCacheSize is the number of recent commit hashes Node keeps (a ring by seq).
const hashCacheSize = 256

type hashCache struct {
	mu   sync.Mutex
	seqs [hashCacheSize]uint64
	hex  [hashCacheSize]string
}

func (c *hashCache) get(seq uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := seq % hashCacheSize
	if seq == 0 || c.seqs[i] != seq {
		return "", false
	}
	return c.hex[i], true
}

func (c *hashCache) put(seq uint64, h string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := seq % hashCacheSize
	c.seqs[i], c.hex[i] = seq, h
}

// waitSigned waits until the local replica has applied the commit that signed id.
func (n *Node) waitSigned(ctx context.Context, id string) (uint64, string, error) {
	for {
		w := n.log.Watch()
		st, ok, err := n.log.IntentStatus(id)
		if err != nil {
			return 0, "", fmt.Errorf("wait signed %q: %w", id, err)
		}
		if ok && st.Seq > 0 {
			if h := n.commitHash(st.Seq); h != "" {
				return st.Seq, h, nil
			}
		}
		select {
		case <-w:
		case <-ctx.Done():
			return 0, "", fmt.Errorf("wait signed %q: %w", id, ErrTimeout)
		case <-n.ctx.Done():
			return 0, "", ErrStopped
		}
	}
}

type submission struct {
	in       intentlog.Intent
	deadline time.Time
	done     chan struct{}
	res      intentlog.IntentResult
	err      error
}

// batcher implements group commit: while one IntentsEntry is in flight, new
// submissions queue; when it returns, the queue (bounded by MaxGroupCount and
// MaxGroupBytes) goes out as the next entry.
type batcher struct {
	n       *Node
	mu      sync.Mutex
	queue   []*submission
	running bool
	closed  bool
	entries uint64 // proposals made (for tests and metrics)
}

func newBatcher(n *Node) *batcher { return &batcher{n: n} }

func (b *batcher) submit(s *submission) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrStopped
	}
	b.queue = append(b.queue, s)
	if !b.running {
		b.running = true
		go b.run()
	}
	return nil
}

func (b *batcher) entriesMade() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entries
}

func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

func (b *batcher) take() []*submission {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running = false
		return nil
	}
	var size int64
	i := 0
	for i < len(b.queue) && i < MaxGroupCount {
		sz := int64(len(b.queue[i].in.Path) + len(b.queue[i].in.Value) + len(b.queue[i].in.ID))
		if i > 0 && size+sz > MaxGroupBytes {
			break
		}
		size += sz
		i++
	}
	batch := b.queue[:i:i]
	b.queue = append([]*submission(nil), b.queue[i:]...)
	b.entries++
	return batch
}

func (b *batcher) run() {
	for {
		batch := b.take()
		if batch == nil {
			return
		}
		// The proposal lives as long as the most patient caller of the batch.
		deadline := time.Now().Add(DefaultSubmitTimeout)
		var latest time.Time
		e := intentlog.IntentsEntry{Intents: make([]intentlog.Intent, len(batch))}
		for i, s := range batch {
			e.Intents[i] = s.in
			if s.deadline.After(latest) {
				latest = s.deadline
			}
		}
		if !latest.IsZero() && latest.Before(deadline) {
			deadline = latest
		}
		// End the proposal a little before its callers give up, so that they get
		// its error (no quorum, timeout at the leader) rather than only their own
		// deadline.
		deadline = deadline.Add(-min(100*time.Millisecond, time.Until(deadline)/10))
		ctx, cancel := context.WithDeadline(b.n.ctx, deadline)
		res, err := b.n.prop.Propose(ctx, e)
		cancel()
		if err == nil && len(res.Intents) != len(batch) {
			err = fmt.Errorf("%w: %d results for %d intents", ErrInternal, len(res.Intents), len(batch))
		}
		for i, s := range batch {
			if err != nil {
				s.err = err
			} else {
				s.res = res.Intents[i]
			}
			close(s.done)
		}
	}
}
