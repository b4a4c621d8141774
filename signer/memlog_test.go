package signer

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// memLog is an in-memory ChainLog (and election.Log) for the loop's tests. Its apply
// follows DESIGN.md's table for the entries the loop and the lease write, and checks
// commits with Verifier and the apply's fencing. Knobs let a test inject faults.
type memLog struct {
	verify intentlog.CommitVerifier

	mu      sync.Mutex
	view    intentlog.View
	pending []intentlog.Intent
	seen    map[string]intentlog.IntentResult // the dedupe window: what is remembered of each ID
	chain   [][]byte
	watch   chan struct{}
	// proposedCommits is every CommitEntry handed to Propose, in order.
	proposedCommits [][]byte
	// hook, if set, runs before the apply; handled=true returns its result instead.
	hook func(ctx context.Context, e intentlog.Entry) (res intentlog.Result, err error, handled bool)
}

// newMemLog is a log whose genesis (applied at index 1) fixes the chain did.
func newMemLog(did string) *memLog {
	m := &memLog{verify: Verifier(did), seen: map[string]intentlog.IntentResult{}, watch: make(chan struct{})}
	m.view.AppliedIndex = 1
	m.view.Chain, m.view.Genesis = did, intentlog.Genesis{Chain: did, Version: 1, Index: 1}
	return m
}

var _ ChainLog = (*memLog)(nil)

func (m *memLog) View() intentlog.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

func (m *memLog) Watch() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.watch
}

func (m *memLog) Pending(maxCount int, maxBytes int64) ([]intentlog.Intent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []intentlog.Intent
	var size int64
	for _, in := range m.pending {
		if maxCount > 0 && len(out) >= maxCount {
			break
		}
		n := int64(len(in.Path) + len(in.Value))
		if maxBytes > 0 && len(out) > 0 && size+n > maxBytes {
			break
		}
		size += n
		out = append(out, in)
	}
	return out, nil
}

func (m *memLog) Commit(seq uint64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq == 0 || seq > uint64(len(m.chain)) {
		return nil, intentlog.ErrNotFound
	}
	return m.chain[seq-1], nil
}

func (m *memLog) IntentStatus(id string) (intentlog.IntentResult, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.seen[id]
	return r, ok, nil
}

func (m *memLog) chainCopy() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.chain...)
}

func (m *memLog) rejectedCommits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.proposedCommits) - len(m.chain)
}

func (m *memLog) commitProposals() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.proposedCommits)
}

func (m *memLog) setHook(h func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool)) {
	m.mu.Lock()
	m.hook = h
	m.mu.Unlock()
}

// submit proposes intents (ids must be fresh) and fails the test on rejection.
func (m *memLog) submit(t *testing.T, ins ...intentlog.Intent) {
	t.Helper()
	res, err := m.Propose(context.Background(), intentlog.IntentsEntry{Intents: ins})
	if err != nil || !res.Accepted {
		t.Fatalf("submit: %v %+v", err, res)
	}
}

func (m *memLog) Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error) {
	m.mu.Lock()
	if ce, ok := e.(intentlog.CommitEntry); ok {
		m.proposedCommits = append(m.proposedCommits, ce.Raw)
	}
	hook := m.hook
	m.mu.Unlock()
	if hook != nil {
		if res, err, handled := hook(ctx, e); handled {
			return res, err
		}
	}
	if err := ctx.Err(); err != nil {
		return intentlog.Result{}, intentlog.ErrTimeout
	}
	return m.apply(e), nil
}

// apply applies e: the in-memory version of the deterministic apply.
func (m *memLog) apply(e intentlog.Entry) intentlog.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.view.AppliedIndex++
	res := intentlog.Result{Index: m.view.AppliedIndex}
	l := &m.view.Lease
	reject := func(r intentlog.Reason) intentlog.Result {
		res.Reason = r
		res.Lease, res.Head = m.view.Lease, m.view.Head
		return res
	}
	holderCheck := func(holder string, epoch uint64) intentlog.Reason {
		switch {
		case l.Holder == "" || l.Holder != holder:
			return intentlog.ReasonNotHolder
		case l.Epoch != epoch:
			return intentlog.ReasonEpochMismatch
		}
		return ""
	}
	switch e := e.(type) {
	case intentlog.IntentsEntry:
		for _, in := range e.Intents {
			if r, dup := m.seen[in.ID]; in.ID == "" || dup {
				r.Duplicate = dup
				res.Intents = append(res.Intents, r)
				continue
			}
			m.seen[in.ID] = intentlog.IntentResult{ID: in.ID, Accepted: true, Index: res.Index}
			m.pending = append(m.pending, in)
			m.view.Pending++
			m.view.PendingBytes += int64(len(in.Path) + len(in.Value))
			res.Accepted = true
			res.Intents = append(res.Intents, intentlog.IntentResult{ID: in.ID, Accepted: true, Index: res.Index})
		}
	case intentlog.ClaimEntry:
		if e.PrevRev != l.Rev || e.Epoch != l.Epoch+1 {
			return reject(intentlog.ReasonEpochMismatch)
		}
		if e.TTL <= 0 {
			return reject(intentlog.ReasonBadEntry)
		}
		*l = intentlog.Lease{Holder: e.Holder, Epoch: e.Epoch, TS: e.TS, TTL: e.TTL, Nonce: e.Nonce}
		res.Accepted = true
	case intentlog.RenewEntry:
		if r := holderCheck(e.Holder, e.Epoch); r != "" {
			return reject(r)
		}
		l.TS = e.TS
		res.Accepted = true
	case intentlog.ReleaseEntry:
		if r := holderCheck(e.Holder, e.Epoch); r != "" {
			return reject(r)
		}
		l.Holder, l.Nonce = "", 0
		res.Accepted = true
	case intentlog.CommitEntry:
		info, err := m.verify(e.Raw)
		if err != nil {
			return reject(intentlog.ReasonBadSignature)
		}
		h := m.view.Head
		switch {
		case l.Holder == "" || info.Signer != l.Holder:
			return reject(intentlog.ReasonNotHolder)
		case info.Epoch != l.Epoch:
			return reject(intentlog.ReasonEpochMismatch)
		case h.Seq == 0 && info.Prev != nil, h.Seq > 0 && !bytes.Equal(info.Prev, h.Hash[:]):
			return reject(intentlog.ReasonBadPrev)
		case info.Seq != h.Seq+1:
			return reject(intentlog.ReasonBadSeq)
		case len(info.Ops) == 0:
			return reject(intentlog.ReasonBadOps)
		}
		// The oldest pending intents it names, in queue order, then the ops it
		// carries (valid, not remembered, not repeated).
		k := 0
		for k < len(info.Ops) && k < len(m.pending) && info.Ops[k].ID == m.pending[k].ID {
			op, p := info.Ops[k], m.pending[k]
			if op.Op != p.Op || op.Path != p.Path || !bytes.Equal(op.Value, p.Value) {
				return reject(intentlog.ReasonBadOps)
			}
			k++
		}
		carried := map[string]bool{}
		for _, op := range info.Ops[k:] {
			if _, dup := m.seen[op.ID]; dup || carried[op.ID] {
				return reject(reasonDuplicateOp)
			}
			carried[op.ID] = true
		}
		for _, p := range m.pending[:k] {
			m.view.PendingBytes -= int64(len(p.Path) + len(p.Value))
			r := m.seen[p.ID]
			r.Seq = info.Seq
			m.seen[p.ID] = r
		}
		for _, op := range info.Ops[k:] {
			m.seen[op.ID] = intentlog.IntentResult{ID: op.ID, Accepted: true, Index: res.Index, Seq: info.Seq}
		}
		m.pending = append([]intentlog.Intent(nil), m.pending[k:]...)
		m.view.Pending = len(m.pending)
		m.chain = append(m.chain, e.Raw)
		m.view.Head = intentlog.Head{Seq: info.Seq, Hash: chain.Hash(e.Raw), Epoch: info.Epoch, Signer: info.Signer}
		res.Accepted = true
	default:
		return reject(intentlog.ReasonMalformed)
	}
	res.Lease, res.Head = m.view.Lease, m.view.Head
	close(m.watch)
	m.watch = make(chan struct{})
	return res
}

// reasonDuplicateOp is the apply's refusal of a commit carrying an ID it remembers.
const reasonDuplicateOp = intentlog.Reason("duplicate_op")

// fakeLease is a Lease whose answers the test sets. grant and revoke also write the
// memLog's lease record, so that the record and the lease agree unless a test makes
// them disagree on purpose.
type fakeLease struct {
	log  *memLog
	self string

	mu       sync.Mutex
	holds    bool
	epoch    uint64
	holdsFn  func() bool // if set, overrides holds (called on every Holds)
	tickFn   func(ctx context.Context) (bool, error)
	ticks    int
	releases int
	bumps    int
	// failReleases makes the next n releases fail without ending the hold (a Lease
	// that breaks the contract: the loop must retry).
	failReleases int
}

var _ Lease = (*fakeLease)(nil)

// grant makes self the holder at epoch in both the record and the lease.
func (f *fakeLease) grant(t *testing.T, epoch uint64) {
	t.Helper()
	v := f.log.View()
	res := f.log.apply(intentlog.ClaimEntry{Holder: f.self, Epoch: epoch, PrevRev: v.Lease.Rev, TS: 1, TTL: 15000})
	if epoch != v.Lease.Epoch+1 || !res.Accepted {
		t.Fatalf("grant epoch %d over %d: %+v", epoch, v.Lease.Epoch, res)
	}
	f.mu.Lock()
	f.holds, f.epoch = true, epoch
	f.mu.Unlock()
}

func (f *fakeLease) setHolds(h bool) {
	f.mu.Lock()
	f.holds = h
	f.mu.Unlock()
}

func (f *fakeLease) RenewOrClaim(ctx context.Context) (bool, error) {
	f.mu.Lock()
	f.ticks++
	fn := f.tickFn
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx)
	}
	return f.Holds(), nil
}

func (f *fakeLease) Holds() bool {
	f.mu.Lock()
	fn, h := f.holdsFn, f.holds
	f.mu.Unlock()
	if fn != nil {
		return fn()
	}
	return h
}

func (f *fakeLease) Epoch() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.holds {
		return 0
	}
	return f.epoch
}

func (f *fakeLease) Release(ctx context.Context) error {
	f.mu.Lock()
	f.releases++
	if f.failReleases > 0 {
		f.failReleases--
		f.mu.Unlock()
		return errors.New("fake: release failed")
	}
	held, epoch := f.holds, f.epoch
	f.holds = false
	f.mu.Unlock()
	if !held {
		return errors.New("fake: not holding")
	}
	res, err := f.log.Propose(ctx, intentlog.ReleaseEntry{Holder: f.self, Epoch: epoch})
	if err != nil {
		return err
	}
	if !res.Accepted {
		return errors.New("fake: release rejected: " + string(res.Reason))
	}
	return nil
}

// Bump claims epoch+1 over this device's own hold (election.Lease.Bump).
func (f *fakeLease) Bump(ctx context.Context) (uint64, error) {
	f.mu.Lock()
	held, epoch := f.holds, f.epoch
	f.mu.Unlock()
	if !held {
		return 0, errors.New("fake: not holding")
	}
	res, err := f.log.Propose(ctx, intentlog.ClaimEntry{Holder: f.self, Epoch: epoch + 1, PrevRev: f.log.View().Lease.Rev, TS: 1, TTL: 15000})
	if err != nil {
		return 0, err
	}
	if !res.Accepted {
		return 0, errors.New("fake: bump rejected: " + string(res.Reason))
	}
	f.mu.Lock()
	f.epoch = epoch + 1
	f.bumps++
	f.mu.Unlock()
	return epoch + 1, nil
}

func (f *fakeLease) counts() (ticks, releases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ticks, f.releases
}

// waitFor polls cond (a non-blocking read) until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond) // polling interval of a bounded wait, not synchronisation
	}
}
