package testnet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// A proposal parked at a paused device's gate goes on at resume with its deadline
// moved by the time it was parked, as a frozen process's would: with its own deadline
// it failed before it was sent, and TestDrillPauseHolder saw nothing refused (CI,
// 2 of 7 runs). A cancelled (not timed-out) context still ends the wait at once.
func TestGateMovesDeadlineByThePause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		g.pause()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		deadline, _ := ctx.Deadline()
		out := make(chan context.Context, 1)
		go func() { out <- g.wait(ctx, intentlog.CommitEntry{}) }()
		time.Sleep(2 * time.Second) // the pause: the proposal's own deadline passes
		synctest.Wait()
		if len(out) != 0 {
			t.Fatal("the parked proposal went on while the device was paused")
		}
		if g.parkedCount() != 1 {
			t.Fatalf("parked %d, want 1", g.parkedCount())
		}
		g.resume()
		moved := <-out
		if moved.Err() != nil {
			t.Fatalf("the proposal goes on with a dead context: %v", moved.Err())
		}
		if got, _ := moved.Deadline(); got.Sub(deadline) != 2*time.Second {
			t.Fatalf("deadline moved by %v, want the 2s pause", got.Sub(deadline))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		g.pause()
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan context.Context, 1)
		go func() { out <- g.wait(ctx, intentlog.CommitEntry{}) }()
		synctest.Wait()
		cancel() // a stopping node
		if c := <-out; c.Err() == nil {
			t.Fatal("a cancelled proposal goes on")
		}
	})
}
