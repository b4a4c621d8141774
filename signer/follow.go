package signer

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// CommitSource is what FollowCommits reads: local, applied state only (*intentlog.Log
// and ChainLog implementations have these methods).
type CommitSource interface {
	View() intentlog.View
	Watch() <-chan struct{}
	Commit(seq uint64) ([]byte, error)
}

var _ CommitSource = (*intentlog.Log)(nil)

// AppliedCommit is a commit the local replica has applied (never one merely
// proposed): safe to publish.
type AppliedCommit struct {
	Seq    uint64
	Hash   [chain.HashSize]byte
	Epoch  uint64
	Signer string
	Raw    []byte // the full encoding
	// Err is set only on the last value Commits sends when it stops on an error.
	Err error
}

// FollowCommits calls fn for every applied commit from seq fromSeq on (0 means 1), in
// order, then waits for more after each applied change, until ctx is done (it returns
// ctx.Err()) or fn or a read fails (it returns that error). It reads only the local
// replica, so it never waits on Raft; a replica that falls behind delivers late, never
// out of order or twice.
func FollowCommits(ctx context.Context, src CommitSource, fromSeq uint64, fn func(AppliedCommit) error) error {
	next := max(fromSeq, 1)
	backoff := time.Millisecond
	for {
		watch := src.Watch() // before reading the head: no wakeup lost
		v := src.View()
		head, applied := v.Head.Seq, v.AppliedIndex
		for ; next <= head; next++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			raw, err := src.Commit(next)
			if err != nil {
				return fmt.Errorf("follow commits: read seq %d: %w", next, err)
			}
			c, err := DecodeCommit(raw)
			if err != nil {
				return fmt.Errorf("follow commits: applied commit seq %d does not decode: %w", next, err)
			}
			if c.Seq != next {
				return fmt.Errorf("follow commits: stored commit at seq %d says seq %d", next, c.Seq)
			}
			if err := fn(AppliedCommit{Seq: c.Seq, Hash: chain.Hash(raw), Epoch: c.Epoch, Signer: c.Signer, Raw: raw}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-watch:
		}
		// A watch channel that fires although nothing was applied (a closed log
		// closes them all) must not spin this loop: back off in real time.
		if src.View().AppliedIndex == applied {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
		} else {
			backoff = time.Millisecond
		}
	}
}

// Commits runs FollowCommits in a goroutine and delivers the commits on a channel,
// closed when ctx is done; if following fails, a last value carries Err. The channel
// is unbuffered: a slow reader slows the follower, never the log.
func Commits(ctx context.Context, src CommitSource, fromSeq uint64) <-chan AppliedCommit {
	ch := make(chan AppliedCommit)
	go func() {
		defer close(ch)
		err := FollowCommits(ctx, src, fromSeq, func(c AppliedCommit) error {
			select {
			case ch <- c:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil && ctx.Err() == nil {
			select {
			case ch <- AppliedCommit{Err: err}:
			case <-ctx.Done():
			}
		}
	}()
	return ch
}

// Commits follows the applied commits of the loop's log from fromSeq (see Commits).
func (l *Loop) Commits(ctx context.Context, fromSeq uint64) <-chan AppliedCommit {
	return Commits(ctx, l.cfg.Log, fromSeq)
}
