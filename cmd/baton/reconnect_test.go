package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// tail and watch outlive their node's restart: they say on stderr that they lost it,
// reconnect with backoff and go on (a9e37ae ended with "unexpected EOF", or silently
// for tail after a graceful stop); with --no-reconnect they exit 1 instead.
func TestTailAndWatchReconnectAcrossARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node")
	}
	data := mustInit(t)
	runArgs := append([]string{"run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0"}, opsFlags...)
	_, _, stop := runInProcess(t, runArgs...)
	testutil.WaitFor(t, 30*time.Second, "the node to hold the lease", func() bool {
		st, err := stateOf(data)
		return err == nil && st.Lease.HeldByMe
	})
	if code, _, errs := runCLI(t, nil, "", "submit", "--data", data, "--path", "a/1", "--value", "x", "--wait", "signed"); code != 0 {
		t.Logf("submit: %d %s (the chain may be empty; tail starts at the head)", code, errs)
	}
	type follower struct {
		out, errb syncBuffer
		done      chan int
	}
	start := func(args ...string) *follower {
		f := &follower{done: make(chan int, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		t.Cleanup(cancel)
		go func() {
			c := &cli{stdin: strings.NewReader(""), stdout: &f.out, stderr: &f.errb, getenv: func(string) string { return "" }}
			f.done <- c.main(ctx, args)
			cancel()
		}()
		return f
	}
	tail := start("tail", "--data", data, "--from", "1")
	watch := start("watch", "--data", data)
	strict := start("watch", "--data", data, "--no-reconnect")
	testutil.WaitFor(t, 10*time.Second, "watch to print the current lease", func() bool {
		return strings.Contains(watch.out.String(), "current") && strings.Contains(strict.out.String(), "current")
	})
	stop()
	select {
	case code := <-strict.done:
		if code != 1 || !strings.Contains(strict.errb.String(), "the node stopped answering") {
			t.Errorf("watch --no-reconnect after the stop: %d %q", code, strict.errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Error("watch --no-reconnect still runs after its node stopped")
	}
	for name, f := range map[string]*follower{"tail": tail, "watch": watch} {
		testutil.WaitFor(t, 20*time.Second, name+" to say it reconnects", func() bool {
			return strings.Contains(f.errb.String(), "reconnecting")
		})
		select {
		case code := <-f.done:
			t.Fatalf("%s exited (%d) when its node stopped: %q", name, code, f.errb.String())
		default:
		}
	}
	runInProcess(t, runArgs...)
	testutil.WaitFor(t, 40*time.Second, "watch to reconnect and print the lease again", func() bool {
		return strings.Contains(watch.errb.String(), "reconnected") && strings.Count(watch.out.String(), "current") >= 2
	})
	if code, _, errs := runCLI(t, nil, "", "submit", "--data", data, "--path", "a/2", "--value", "y", "--wait", "signed"); code != 0 {
		t.Fatalf("submit after the restart: %d %s", code, errs)
	}
	testutil.WaitFor(t, 40*time.Second, "tail to reconnect and print the new commit", func() bool {
		return strings.Contains(tail.errb.String(), "reconnected") && strings.Contains(tail.out.String(), "a/2")
	})
}
