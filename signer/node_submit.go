package signer

import (
	"context"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/intentlog"
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

// ValidateIntent checks an intent as the apply would, so that a bad one is refused
// before it reaches the log (and changes nothing). A put without a value is an empty
// value.
func ValidateIntent(in *intentlog.Intent) error {
	switch {
	case in.ID == "":
		return fmt.Errorf("%w: missing id", ErrBadRequest)
	case len(in.ID) > intentlog.MaxIDLen:
		return fmt.Errorf("%w: id longer than %d bytes", ErrTooLarge, intentlog.MaxIDLen)
	case len(in.Path) > intentlog.MaxPathLen:
		return fmt.Errorf("%w: path longer than %d bytes", ErrTooLarge, intentlog.MaxPathLen)
	case !intentlog.ValidPath(in.Path):
		return fmt.Errorf("%w: %q is not collection/rkey (printable, no spaces)", ErrBadPath, in.Path)
	}
	switch in.Op {
	case intentlog.OpPut:
		if len(in.Value) > intentlog.MaxValueLen {
			return fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, len(in.Value), intentlog.MaxValueLen)
		}
		if in.Value == nil {
			in.Value = []byte{}
		}
	case intentlog.OpDel:
		if len(in.Value) > 0 {
			return fmt.Errorf("%w: del carries no value", ErrBadRequest)
		}
		in.Value = nil
	default:
		return fmt.Errorf("%w: op must be put or del", ErrBadRequest)
	}
	return nil
}

// Submit proposes one intent. Concurrent submissions share Raft entries (group
// commit). The same ID again returns the original result (Duplicate set). With
// WaitSigned it returns once the commit containing the intent is applied locally.
// Without a deadline on ctx, DefaultSubmitTimeout applies. An error after the intent
// left this node (ErrTimeout, ErrNoQuorum) means the outcome is unknown: submit the
// same ID again to learn it.
func (n *Node) Submit(ctx context.Context, in intentlog.Intent, wait Wait) (SubmitResult, error) {
	if err := ValidateIntent(&in); err != nil {
		return SubmitResult{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultSubmitTimeout)
		defer cancel()
	}
	start := time.Now()
	timed := n.metrics.track(in.ID, start)
	untrack := func() {
		if timed {
			n.metrics.untrack(in.ID)
		}
	}
	s := &submission{in: intentlog.Intent{ID: in.ID, Op: in.Op, Path: in.Path, Value: in.Value}, done: make(chan struct{})}
	s.deadline, _ = ctx.Deadline()
	if err := n.batch.submit(s); err != nil {
		untrack()
		return SubmitResult{}, err
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return SubmitResult{}, fmt.Errorf("submit %q: %w", in.ID, ErrTimeout)
	case <-n.ctx.Done():
		return SubmitResult{}, ErrStopped
	}
	if s.err != nil {
		untrack()
		return SubmitResult{}, fmt.Errorf("submit %q: %w", in.ID, s.err)
	}
	r := s.res
	if !r.Accepted || r.Seq > 0 {
		untrack()
	}
	if !r.Accepted {
		return SubmitResult{}, rejection(r)
	}
	out := SubmitResult{ID: r.ID, Index: r.Index, Seq: r.Seq, Duplicate: r.Duplicate}
	if out.ID == "" {
		out.ID = in.ID
	}
	if wait != WaitSigned {
		if out.Seq > 0 {
			out.Hash = n.commitHash(out.Seq)
		}
		return out, nil
	}
	seq, hash, err := n.waitSigned(ctx, out.ID)
	if err != nil {
		return out, err
	}
	out.Seq, out.Hash = seq, hash
	return out, nil
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
	h := Hash(raw)
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
	// flight is the entry in flight once this node's Raft has queued it (it leads
	// Raft), until its proposal returns: the signer loop signs it without waiting for
	// its apply (see inflight).
	flight []intentlog.Intent
	// wake is called when an entry is queued in Raft (the node wakes the loop).
	wake func()
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

// inflight returns the intents of the entry this node has queued in its own Raft and
// whose proposal has not returned yet (nil when none), in entry order.
func (b *batcher) inflight() []intentlog.Intent {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flight
}

func (b *batcher) setFlight(in []intentlog.Intent) {
	b.mu.Lock()
	b.flight = in
	b.mu.Unlock()
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
		ctx = intentlog.WithEnqueued(ctx, func() {
			b.setFlight(e.Intents)
			if b.wake != nil {
				b.wake()
			}
		})
		res, err := b.n.prop.Propose(ctx, e)
		b.setFlight(nil)
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
