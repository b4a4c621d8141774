//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// When CMD ends by itself or exec is interrupted, exec releases the hold (as `consul
// lock` and `etcdctl lock` do) unless --keep-lease; a hold that ended under CMD is not
// released (it is not this device's any more). A fake node; CMD is a real process.
func TestExecReleasesWhenTheCommandEnds(t *testing.T) {
	run := func(t *testing.T, ctx context.Context, release bool, stdout io.Writer, script string) (*fakeExecNode, error) {
		n := newFakeExecNode(5 * time.Second)
		n.handOver()
		c := &cli{stdin: strings.NewReader(""), stdout: stdout, stderr: io.Discard, getenv: func(string) string { return "" }}
		f := &apiFlags{data: new(string), api: new(string), tokenFile: new(string), getenv: c.getenv}
		return n, c.execWith(ctx, f, n, 0, time.Second, release, []string{"sh", "-c", script})
	}
	code := func(err error) int {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		if err != nil {
			return 1
		}
		return 0
	}
	released := func(n *fakeExecNode) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.released
	}
	for _, tc := range []struct {
		name    string
		release bool
	}{{"default", true}, {"keep-lease", false}} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := run(t, t.Context(), tc.release, io.Discard, "exit 7")
			if c := code(err); c != 7 {
				t.Fatalf("exec of a command that exits 7: %d (%v)", c, err)
			}
			if released(n) != tc.release {
				t.Fatalf("released %v after the command ended, want %v", released(n), tc.release)
			}
		})
	}
	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var out syncBuffer
		done := make(chan struct{})
		var n *fakeExecNode
		var err error
		go func() {
			defer close(done)
			n, err = run(t, ctx, true, &out, "echo started; exec sleep 300")
		}()
		testutil.WaitFor(t, 20*time.Second, "the command to start", func() bool { return strings.Contains(out.String(), "started") })
		cancel() // Ctrl-C
		<-done
		if c := code(err); c != 130 {
			t.Fatalf("interrupted exec: %d (%v)", c, err)
		}
		if !released(n) {
			t.Fatal("an interrupted exec kept the lease")
		}
	})
}
