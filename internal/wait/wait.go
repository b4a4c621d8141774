// Package wait is baton's one poll-with-deadline helper, for the places where no event
// says that a condition became true (another process's state, a file, a count kept by
// a dependency). Where an event exists (a watch channel, a done channel), wait on it
// instead.
package wait

import (
	"context"
	"fmt"
	"time"
)

// Interval bounds for Until: the first recheck comes after MinInterval, then the
// interval doubles up to MaxInterval, so a condition that turns true quickly is seen
// quickly and a long wait costs little.
const (
	MinInterval = time.Millisecond
	MaxInterval = 50 * time.Millisecond
)

// TimeoutError is returned by Until when ctx ended before cond held. It unwraps to
// ctx's error (context.DeadlineExceeded or context.Canceled).
type TimeoutError struct {
	What string        // what was waited for
	Last string        // the last explanation cond gave (UntilWhy), if any
	Took time.Duration // how long it waited
	Err  error         // ctx.Err()
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("gave up waiting for %s after %s", e.What, e.Took.Round(time.Millisecond))
	if e.Last != "" {
		msg += " (last: " + e.Last + ")"
	}
	return msg
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// Until calls cond until it returns true or ctx ends (then a *TimeoutError naming
// what). cond must not block.
func Until(ctx context.Context, what string, cond func() bool) error {
	return UntilWhy(ctx, what, func() (bool, string) { return cond(), "" })
}

// UntilWhy is Until for a condition that can say why it does not hold yet; the last
// reason goes into the error.
func UntilWhy(ctx context.Context, what string, cond func() (bool, string)) error {
	start := time.Now()
	interval := MinInterval
	var t *time.Timer
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if t == nil {
			t = time.NewTimer(interval)
			defer t.Stop()
		} else {
			t.Reset(interval)
		}
		select {
		case <-ctx.Done():
			return &TimeoutError{What: what, Last: why, Took: time.Since(start), Err: ctx.Err()}
		case <-t.C:
		}
		interval = min(2*interval, MaxInterval)
	}
}

// For is Until with a timeout instead of a context.
func For(timeout time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Until(ctx, what, cond)
}
