package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
)

const watchLong = `Prints every lease change as this device applies it, one line each, until Ctrl-C:
claim, release, transfer, steal (applied lease entries), lost (this device's hold
ended), lapsed (the holder stopped renewing, as this device sees it), and renewals with
--renewals. The first line is the lease as it is now ("current"). --json prints the
API's NDJSON lines (GET /v1/lease/watch). When the node stops answering (a restart,
a failover drill) watch says so on stderr and reconnects with backoff (up to 10 s
between attempts), starting again with the current lease; --no-reconnect exits
instead (status 1).`

func (c *cli) watchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "watch [--renewals] [--json]", Short: "print every lease change as it is applied",
		Long: watchLong, Example: "  baton watch --data /tmp/b1\n  baton watch --data /tmp/b1 --json | jq -c .", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 0, "")
	renewals := cmd.Flags().Bool("renewals", false, "also print renewals")
	asJSON := cmd.Flags().Bool("json", false, "print NDJSON lines")
	noReconnect := cmd.Flags().Bool("no-reconnect", false, "exit when the node stops answering instead of reconnecting")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		cl, err := f.client()
		if err != nil {
			return err
		}
		defer cl.Close()
		r := &reconnector{c: c, name: "watch", off: *noReconnect}
		enc := json.NewEncoder(c.stdout)
		for {
			st, err := cl.State(ctx)
			if err != nil {
				if r.down && r.again(ctx, err) {
					continue
				}
				if ctx.Err() != nil {
					return nil
				}
				return f.apiErr(err)
			}
			r.connected(" (the next line is the lease as it is now)")
			ch, errc := cl.WatchLease(ctx, *renewals)
			for lc := range ch {
				if *asJSON {
					if err := enc.Encode(lc); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintln(c.stdout, leaseLine(lc, st.ID))
			}
			err = <-errc
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("the stream ended")
			}
			if !r.again(ctx, err) {
				return fmt.Errorf("the node stopped answering: %w", f.apiErr(err))
			}
		}
	}
	return cmd
}

func leaseLine(lc node.LeaseChange, self string) string {
	who := func(id string) string {
		switch id {
		case "":
			return "nobody"
		case self:
			return shortPeer(id) + " (this device)"
		}
		return shortPeer(id)
	}
	line := fmt.Sprintf("%s  %-8s epoch %-4d holder %s", lc.At.Format("15:04:05.000"), lc.Event, lc.Epoch, who(lc.Holder))
	if lc.Prior != "" {
		line += "  (was " + who(lc.Prior) + ")"
	}
	return line
}

const execLong = `Runs CMD while this device holds the lease, as ` + "`consul lock`" + ` and ` + "`etcdctl lock`" + ` do:
it first waits until this device holds the lease (its signer loop claims a free lease by
itself; a lease held by another device is waited out, never stolen; --timeout bounds
the wait; while it waits it says on stderr who holds the lease, and again each time
the lease moves), then starts CMD with this command's stdin, stdout and stderr. The moment the
hold ends (lost, released, transferred, stolen, or this device's may-sign window
closes without a renewal it has seen, or the node stops answering), CMD gets SIGTERM,
then SIGKILL after --grace. CMD runs in a process group of its own and the signals go
to the whole group, so what CMD started stops with it; when CMD ends by itself, what
it left running in its group is stopped the same way. A process that leaves the group
(setsid, a daemon that double-forks, systemd-run) is not reached. CMD is not in the
terminal's foreground group: Ctrl-C reaches exec, which stops the group; give CMD its
input through a pipe or a file, not a terminal. When CMD ends by itself or exec is
interrupted, exec releases the lease (a standby claims it at once), as ` + "`consul lock`" + ` and
` + "`etcdctl lock`" + ` do; --keep-lease keeps holding it instead (the holder renews it as
before). Exit status: CMD's own when it ends by itself; 1 when the hold ended under it;
130 when interrupted; 2 for a usage error.

The lease guards the chain; exec makes it a hint for work that should run on one
device at a time. Like any lock of this kind it is not a fence: between the hold
ending and CMD stopping there is a window (up to --grace and the time to notice).`

const execExample = `  baton exec --data /tmp/b1 -- ./publish.sh
  baton exec --data /tmp/b1 --timeout 1m --grace 5s -- backup --once
  baton exec --data /tmp/b1 --keep-lease -- ./warm-cache.sh`

func (c *cli) execCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "exec [flags] -- CMD [ARGS...]", Short: "run a command while this device holds the lease",
		Long: execLong, Example: execExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("want a command to run after --")
			}
			return nil
		}}
	fs := cmd.Flags()
	f := c.addAPIFlags(fs, 0, "")
	timeout := fs.Duration("timeout", 0, "give up waiting for the lease after this long (0: wait until Ctrl-C)")
	grace := fs.Duration("grace", 10*time.Second, "after SIGTERM, how long CMD may take before SIGKILL")
	keep := fs.Bool("keep-lease", false, "keep holding the lease when CMD ends or exec is interrupted (default: release it)")
	// --release was the opt-in to what is now the default; accepted, and said so.
	fs.Bool("release", false, "release the lease when CMD ends (the default now)")
	_ = fs.MarkDeprecated("release", "releasing when CMD ends is the default now (--keep-lease keeps the lease)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *timeout < 0 || *grace < 0 {
			return usagef("--timeout and --grace must not be negative")
		}
		if *keep && cmd.Flags().Changed("release") {
			return usagef("--keep-lease and --release contradict each other")
		}
		return c.runExec(cmd.Context(), f, *timeout, *grace, !*keep, args)
	}
	return cmd
}

// execNode is what exec asks of the node: an *api.Client, or a test's fake.
type execNode interface {
	campaigner
	WatchLease(ctx context.Context, renewals bool) (<-chan node.LeaseChange, <-chan error)
	Release(ctx context.Context) error
}

var _ execNode = (*api.Client)(nil)

func (c *cli) runExec(ctx context.Context, f *apiFlags, timeout, grace time.Duration, release bool, args []string) error {
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	return c.execWith(ctx, f, cl, timeout, grace, release, args)
}

// execWith is exec over cl: it waits for the hold, runs CMD under it, and releases the
// hold when CMD ends by itself or exec is interrupted (when release).
func (c *cli) execWith(ctx context.Context, f *apiFlags, cl execNode, timeout, grace time.Duration, release bool, args []string) error {
	h, err := c.acquire(ctx, f, cl, timeout)
	if err != nil {
		return err
	}
	hctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	ended := make(chan string, 1)
	go func() { ended <- h.watch(hctx) }()

	child := exec.Command(args[0], args[1:]...)
	child.Stdin, child.Stdout, child.Stderr = c.stdin, c.stdout, c.stderr
	ownGroup(child) // CMD and its children: one process group, stopped as one
	// Output copied through a pipe (stdout not a file) is not waited for beyond the
	// group's end: a process that left the group may hold the pipe open.
	child.WaitDelay = time.Second
	if err := child.Start(); err != nil {
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	why := ""
	select {
	case err := <-exited:
		stopWatch()
		// What CMD left running in its group stops with it: nothing started
		// under the hold outlives exec.
		stopGroup(child, grace)
		if release {
			c.releaseHold(cl, args[0])
		}
		return childStatus(args[0], err)
	case <-ctx.Done():
		why = "interrupted"
	case why = <-ended:
		if why == "" {
			why = "interrupted" // the watch ended with ctx
		}
	}
	stopChild(child, exited, grace)
	if why == "interrupted" {
		if release {
			c.releaseHold(cl, args[0])
		}
		return &exitError{code: 130, msg: fmt.Sprintf("interrupted: stopped %s", args[0])}
	}
	return fmt.Errorf("%s: stopped %s", why, args[0])
}

// releaseHold gives this device's hold up once CMD has stopped (as `consul lock` and
// `etcdctl lock` do), so that a standby takes over at once instead of after a TTL. It
// releases only this device's own hold: when the hold ended meanwhile, nothing is
// released and nothing is said.
func (c *cli) releaseHold(cl execNode, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Release(ctx); err != nil && !errors.Is(err, node.ErrNotHolder) {
		fmt.Fprintf(c.stderr, "baton exec: release after %s: %s\n", name, describe(err))
	}
}

// execHold is this device's hold of the lease as exec follows it.
type execHold struct {
	cl  execNode
	ttl time.Duration
	// validUntil: the hold's may-sign window closes then unless a renewal is seen.
	validUntil time.Time
}

// acquire waits until this device holds the lease (campaign) and returns the hold.
func (c *cli) acquire(ctx context.Context, f *apiFlags, cl execNode, timeout time.Duration) (*execHold, error) {
	lease, err := c.campaign(ctx, f, cl, timeout, "exec")
	if err != nil {
		return nil, err
	}
	// The hold is good until its may-sign window closes, as of a reading taken now:
	// not as of when exec started waiting (before, a standby that waited longer than
	// the window saw it closed at once and stopped CMD right after the claim).
	at := time.Now()
	st, err := cl.State(ctx)
	if err != nil {
		return nil, f.apiErr(err)
	}
	if !st.Lease.HeldByMe {
		return nil, fmt.Errorf("this device held the lease at epoch %d and no longer does (%s); the command was not started", lease.Epoch, leaseWaitText(st))
	}
	return &execHold{cl: cl, ttl: ms(st.Lease.TTLMs), validUntil: at.Add(ms(st.Lease.ExpiresInMs))}, nil
}

// watch follows the hold until it ends and says why; "" when ctx ends first.
func (h *execHold) watch(ctx context.Context) string {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events, errc := h.cl.WatchLease(wctx, true)
	refresh := time.NewTicker(max(h.ttl/6, 50*time.Millisecond))
	defer refresh.Stop()
	expiry := time.NewTimer(time.Until(h.validUntil))
	defer expiry.Stop()
	extend := func(at time.Time, expiresIn int64) {
		if t := at.Add(ms(expiresIn)); t.After(h.validUntil) {
			h.validUntil = t
			expiry.Reset(time.Until(h.validUntil))
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ""
		case lc, ok := <-events:
			if !ok {
				why := "the node stopped answering"
				if err := <-errc; err != nil {
					why += " (" + describe(err) + ")"
				}
				return why
			}
			if !lc.HeldByMe || lc.Event == "lost" {
				return fmt.Sprintf("the lease hold ended (%s, epoch %d, holder %s)", lc.Event, lc.Epoch, orNone(shortPeer(lc.Holder)))
			}
			extend(lc.At, lc.ExpiresInMs)
		case <-refresh.C:
			at := time.Now()
			sctx, scancel := context.WithTimeout(ctx, time.Until(h.validUntil))
			st, err := h.cl.State(sctx)
			scancel()
			if err == nil && st.Lease.HeldByMe {
				extend(at, st.Lease.ExpiresInMs)
			} else if err == nil {
				return "the lease hold ended (this device no longer holds it)"
			}
		case <-expiry.C:
			if time.Now().Before(h.validUntil) {
				expiry.Reset(time.Until(h.validUntil))
				continue
			}
			return "the may-sign window closed without a renewal seen"
		}
	}
}

// stopChild sends SIGTERM to CMD's process group, then SIGKILL after grace to what
// is left of it, and waits for CMD.
func stopChild(child *exec.Cmd, exited <-chan error, grace time.Duration) {
	deadline := time.Now().Add(grace)
	signalGroup(child, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		// CMD stopped: its group may still hold processes; they get the rest of
		// the grace.
		stopGroupBy(child, deadline)
		return
	case <-t.C:
	}
	signalGroup(child, syscall.SIGKILL)
	<-exited
}

// stopGroup stops what is left of an exited CMD's process group: SIGTERM, SIGKILL
// after grace.
func stopGroup(child *exec.Cmd, grace time.Duration) {
	if groupGone(child) {
		return
	}
	signalGroup(child, syscall.SIGTERM)
	stopGroupBy(child, time.Now().Add(grace))
}

// stopGroupBy waits (polling, bounded by deadline) for CMD's process group to
// empty, then SIGKILLs what remains.
func stopGroupBy(child *exec.Cmd, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if wait.Until(ctx, "the command's process group to end", func() bool { return groupGone(child) }) != nil {
		signalGroup(child, syscall.SIGKILL)
	}
}

// childStatus passes the child's exit status on.
func childStatus(name string, err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return &exitError{code: code}
		}
		return &exitError{code: 1, msg: fmt.Sprintf("%s: %v", name, err)}
	}
	return fmt.Errorf("%s: %w", name, err)
}

var _ = api.MaxCampaignWait
