package wait

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	if err := For(5*time.Second, "three calls", func() bool { return n.Add(1) >= 3 }); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", n.Load())
	}
}

func TestUntilTimesOutWithTheLastReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := UntilWhy(ctx, "the impossible", func() (bool, string) { return false, "still no" })
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a *TimeoutError wrapping DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "the impossible") || !strings.Contains(err.Error(), "still no") {
		t.Fatalf("message %q lacks what or why", err)
	}
}
