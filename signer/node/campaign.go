package node

import (
	"context"
	"fmt"
	"time"
)

// Campaign blocks until this device holds the lease and may sign, or ctx ends, and
// returns the hold's context: it is cancelled the moment the hold ends (see
// HoldContext). The signer loop claims a free lease by itself; Campaign waits for
// that, and waits out a live lease held by another device (it never steals). Like
// `consul lock`, it is a hint for work that must run on one device at a time, not a
// fence: a device can lose the lease at any moment (the returned context says so),
// and only the chain's epoch fencing makes commits safe.
//
// Errors: ErrConflict on a device without the chain key (it never holds); ErrTimeout
// (wrapping ctx's error) when ctx ends first; ErrStopped when the node stops.
func (n *Node) Campaign(ctx context.Context) (context.Context, error) {
	if n.loop == nil {
		return nil, fmt.Errorf("%w: this device has no chain key and never holds the lease", ErrConflict)
	}
	// The applied log wakes us on every lease change; the recheck covers what
	// applies nothing (the loop's own view of its hold).
	recheck := max(n.cfg.Tick/4, 10*time.Millisecond)
	t := time.NewTimer(recheck)
	defer t.Stop()
	for {
		w := n.log.Watch()
		if n.Holds() {
			if hc := n.HoldContext(); hc.Err() == nil {
				return hc, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("campaign: %w (%w)", ErrTimeout, ctx.Err())
		case <-n.ctx.Done():
			return nil, fmt.Errorf("campaign: %w", ErrStopped)
		case <-w:
		case <-t.C:
			t.Reset(recheck)
		}
	}
}
