package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
)

const campaignLong = `Waits until this device holds the lease (POST /v1/lease/campaign, asked again every
30 s), then prints its epoch. Its signer loop claims a free lease by itself; a lease
another device holds is waited out, never stolen (that is ` + "`lease steal`" + `). While it
waits it says on stderr who holds the lease and when this device may claim it, and
again each time the lease moves to another holder.
--timeout bounds the wait (0: until Ctrl-C). Exit status 0 once held, 1 on timeout.`

func (c *cli) leaseCampaign() *cobra.Command {
	cmd := &cobra.Command{Use: "campaign [--timeout D]", Short: "wait until this device holds the lease",
		Long: campaignLong, Example: "  baton lease campaign --data /tmp/b2 --timeout 1m", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 0, "")
	timeout := cmd.Flags().Duration("timeout", 0, "give up waiting for the lease after this long (0: wait until Ctrl-C)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *timeout < 0 {
			return usagef("--timeout must not be negative")
		}
		cl, err := f.client()
		if err != nil {
			return err
		}
		defer cl.Close()
		lease, err := c.campaign(cmd.Context(), f, cl, *timeout, "lease campaign")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "this device holds the lease at epoch %d\n", lease.Epoch)
		return nil
	}
	return cmd
}

// campaigner is what campaign asks of the node: an *api.Client, or a test's fake.
type campaigner interface {
	State(ctx context.Context) (node.State, error)
	Campaign(ctx context.Context) (node.LeaseState, error)
	WatchLease(ctx context.Context, renewals bool) (<-chan node.LeaseChange, <-chan error)
}

var _ campaigner = (*api.Client)(nil)

// campaign waits (bounded by timeout when > 0) until this device holds the lease,
// saying on stderr what it waits for and who holds it when it has to wait.
func (c *cli) campaign(ctx context.Context, f *apiFlags, cl campaigner, timeout time.Duration, name string) (node.LeaseState, error) {
	st, err := cl.State(ctx)
	if err != nil {
		return node.LeaseState{}, f.apiErr(err)
	}
	if !st.Lease.HeldByMe {
		fmt.Fprintf(c.stderr, "baton %s: waiting for this device (%s) to hold the lease: %s\n", name, shortPeer(st.ID), leaseWaitText(st))
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	lease, err := c.campaignSaying(wctx, cl, st, name)
	if err == nil {
		return lease, nil
	}
	if ctx.Err() != nil {
		return node.LeaseState{}, &exitError{code: 130, msg: "interrupted while waiting for the lease"}
	}
	if errors.Is(err, node.ErrTimeout) {
		now, serr := cl.State(ctx)
		if serr == nil {
			st = now
		}
		return node.LeaseState{}, fmt.Errorf("this device did not get the lease within --timeout %s; %s", timeout, leaseWaitText(st))
	}
	return node.LeaseState{}, f.apiErr(err)
}

// campaignSaying campaigns and, while it waits, says on stderr each time the lease
// moves to another holder (or is released), so that a long wait shows who holds the
// lease now, not only who held it when the wait began.
func (c *cli) campaignSaying(ctx context.Context, cl campaigner, st node.State, name string) (node.LeaseState, error) {
	if st.Lease.HeldByMe {
		return cl.Campaign(ctx)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		events, _ := cl.WatchLease(wctx, false)
		last := st.Lease.Holder
		for lc := range events {
			if lc.HeldByMe || lc.Holder == st.ID || lc.Holder == last {
				continue // this device's own claim ends the wait; no change to tell
			}
			last = lc.Holder
			fmt.Fprintf(c.stderr, "baton %s: still waiting: %s\n", name, leaseMovedText(lc))
		}
	}()
	lease, err := cl.Campaign(wctx)
	stop()
	<-done // nothing more is written once campaign returns
	return lease, err
}

// leaseMovedText says where the lease went, for a device that waits for it.
func leaseMovedText(lc node.LeaseChange) string {
	if lc.Holder == "" {
		return fmt.Sprintf("nobody holds the lease (%s at epoch %d): the first standby's signer loop claims it at its next tick", lc.Event, lc.Epoch)
	}
	return fmt.Sprintf("the lease is now held by %s at epoch %d (%s)", shortPeer(lc.Holder), lc.Epoch, lc.Event)
}

// leaseWaitText says who holds the lease and when this device may claim it.
func leaseWaitText(st node.State) string {
	l := st.Lease
	switch {
	case !st.Signer:
		return "this device has no chain key and never holds it"
	case l.Holder == "":
		return fmt.Sprintf("nobody holds it (free at epoch %d): this device's signer loop claims it at its next tick", l.Epoch)
	case l.Holder == st.ID:
		return fmt.Sprintf("the record names this device at epoch %d; it holds once its fresh write is applied", l.Epoch)
	case l.ExpiresInMs > 0:
		return fmt.Sprintf("held by %s at epoch %d; claimable by this device in %s if the holder stops renewing", shortPeer(l.Holder), l.Epoch, (time.Duration(l.ExpiresInMs) * time.Millisecond).Round(100*time.Millisecond))
	}
	return fmt.Sprintf("held by %s at epoch %d (lapsing as this device sees it)", shortPeer(l.Holder), l.Epoch)
}
