package signer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

func TestFollowCommitsDeliversAppliedInOrder(t *testing.T) {
	h := newHarness(t, func(c *LoopConfig) { c.MaxBatchCount = 1 })
	h.lease.grant(t, 1)
	h.start()
	h.log.submit(t, intents(0, 3)...)
	waitFor(t, "three commits", func() bool { return h.log.View().Head.Seq == 3 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := h.loop.Commits(ctx, 2)
	got := func() AppliedCommit {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("channel closed")
			}
			if c.Err != nil {
				t.Fatal(c.Err)
			}
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no commit delivered")
		}
		return AppliedCommit{}
	}
	for _, want := range []uint64{2, 3} {
		c := got()
		raw, _ := h.log.Commit(want)
		if c.Seq != want || c.Hash != chain.Hash(raw) || c.Epoch != 1 || c.Signer != self || string(c.Raw) != string(raw) {
			t.Fatalf("delivered %+v, want seq %d", c, want)
		}
	}
	// Later commits are delivered after they apply, never before.
	h.log.submit(t, intents(3, 1)...)
	if c := got(); c.Seq != 4 || h.log.View().Head.Seq < 4 {
		t.Fatalf("seq %d delivered with head %d", c.Seq, h.log.View().Head.Seq)
	}
	cancel()
	for range ch { // drains and ends: the channel closes on cancel
	}
}

// brokenSource claims a head it cannot read.
type brokenSource struct{ *memLog }

func (b brokenSource) View() intentlog.View {
	v := b.memLog.View()
	v.Head.Seq = 5
	return v
}

func TestFollowCommitsStopsOnReadError(t *testing.T) {
	m := newMemLog(testKey(t, 0).DID())
	err := FollowCommits(context.Background(), brokenSource{m}, 0, func(AppliedCommit) error { return nil })
	if !errors.Is(err, intentlog.ErrNotFound) {
		t.Fatalf("FollowCommits = %v, want ErrNotFound", err)
	}
	c := <-Commits(context.Background(), brokenSource{m}, 0)
	if !errors.Is(c.Err, intentlog.ErrNotFound) {
		t.Fatalf("Commits sent %+v, want Err ErrNotFound", c)
	}
}
