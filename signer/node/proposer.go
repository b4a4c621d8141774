package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/transport"
)

// proposer is the node's view of the intent log for the lease and the signer loop:
// reads go to the local replica (never waiting on Raft); Propose goes through the
// Cluster (locally on the leader, forwarded otherwise); Sync is a read barrier on the
// leader followed by a local WaitApplied.
type proposer struct {
	log    *intentlog.Log
	net    Network
	before func(context.Context, intentlog.Entry) context.Context
	killed *atomic.Bool // the node's: set by Kill, read by every proposal
}

var (
	_ election.Log           = (*proposer)(nil)
	_ election.Syncer        = (*proposer)(nil)
	_ election.Watcher       = (*proposer)(nil)
	_ election.AppliedWaiter = (*proposer)(nil)
	_ election.StoreTimer    = (*proposer)(nil)
	_ signer.ChainLog        = (*proposer)(nil)
)

func (p *proposer) View() intentlog.View { return p.log.View() }

func (p *proposer) Watch() <-chan struct{} { return p.log.Watch() }

// StoredAt is when the local replica stored log entry index, on the node's clock
// (intentlog.Config.Mono): the lease counts a record from there.
func (p *proposer) StoredAt(index uint64) (time.Duration, bool) { return p.log.StoredAt(index) }

func (p *proposer) Pending(maxCount int, maxBytes int64) ([]intentlog.Intent, error) {
	return p.log.Pending(maxCount, maxBytes)
}

func (p *proposer) IntentStatus(id string) (intentlog.IntentResult, bool, error) {
	return p.log.IntentStatus(id)
}

func (p *proposer) Commit(seq uint64) ([]byte, error) { return p.log.Commit(seq) }

func (p *proposer) WaitApplied(ctx context.Context, index uint64) error {
	return p.log.WaitApplied(ctx, index)
}

// Propose encodes e and runs it through the leader. An error means the outcome is
// unknown.
func (p *proposer) Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error) {
	if p.killed.Load() {
		return intentlog.Result{}, ErrStopped
	}
	if p.before != nil {
		ctx = p.before(ctx, e)
		if p.killed.Load() { // killed while the knob held the proposal
			return intentlog.Result{}, ErrStopped
		}
	}
	b, err := intentlog.Encode(e)
	if err != nil {
		return intentlog.Result{}, fmt.Errorf("propose: %w", err)
	}
	out, err := p.net.Propose(ctx, b)
	if err != nil {
		return intentlog.Result{}, fmt.Errorf("propose: %w", err)
	}
	res, err := intentlog.DecodeResult(out)
	if err != nil {
		return intentlog.Result{}, fmt.Errorf("propose: leader's result: %w", err)
	}
	return res, nil
}

// Sync returns once the local replica has applied everything the leader had
// committed when it answered (a read barrier). Bounded by ctx.
func (p *proposer) Sync(ctx context.Context) error {
	if p.killed.Load() {
		return ErrStopped
	}
	idx, err := p.net.Barrier(ctx)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return p.log.WaitApplied(ctx, idx)
}

// barrierOnLeader is Handlers.Barrier: a Raft barrier on this node, which leads.
func (n *Node) barrierOnLeader(ctx context.Context) (uint64, error) {
	if n.killed.Load() {
		return 0, fmt.Errorf("%w: %w", transport.ErrNotLeader, ErrStopped)
	}
	idx, err := n.log.Barrier(ctx)
	return idx, leaderErr(err)
}

// leaderErr maps intentlog's not-leader errors to the ones a Network retries at the
// new leader.
func leaderErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, intentlog.ErrNotLeader):
		return fmt.Errorf("%w: %w", transport.ErrNotLeader, err)
	case errors.Is(err, intentlog.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", raft.ErrLeadershipLost, err)
	}
	return err
}

// applyOnLeader is the Cluster's ApplyFunc: the encoded entry through the local log. Not-leader errors are mapped to
// the ones the Cluster retries at the new leader.
func (n *Node) applyOnLeader(ctx context.Context, b []byte) ([]byte, error) {
	if n.killed.Load() {
		return nil, fmt.Errorf("%w: %w", transport.ErrNotLeader, ErrStopped)
	}
	out, err := n.log.ApplyEncoded(ctx, b)
	if err != nil {
		return nil, leaderErr(err)
	}
	return out, nil
}
