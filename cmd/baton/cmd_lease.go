package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
)

const leaseLong = `Hands the lease over, overrides a wedged holder, or reads the lease's audit trail.

  release                 the holder gives the lease up; a standby claims it at once
  transfer --to PEER      the holder hands it to member PEER (one Raft entry at epoch+1;
                          PEER claims epoch+2 before it signs: see docs/DESIGN.md)
  steal --reason TEXT     operator override for a wedged holder: this device takes the
                          lease by force (epoch+1); the reason goes into the history
  history                 the audit trail, oldest first (renewals folded by default)
  campaign                wait until this device holds the lease (never steals)

release and transfer are done by the holder; run on any other member, the request goes
to the holder (the one the member's replica names, at the epoch it names: a request
that arrives after the lease moved on is refused, not applied to the next hold). PEER
may be a full peer ID or an unambiguous part of one (a prefix, or the …aN1816 suffix
other commands print).`

const leaseExample = `  baton lease transfer --data /tmp/b1 --to …aN1816
  baton lease steal --data /tmp/b2 --reason "b1 hung, kernel panic"
  baton lease history --data /tmp/b1 --event claim,steal --since 1h`

func (c *cli) leaseCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "lease (release | transfer --to PEER | steal --reason TEXT | history | campaign)",
		Short: "release, transfer or steal the lease; show its history", Long: leaseLong, Example: leaseExample,
	}
	cmd.AddCommand(c.leaseRelease(), c.leaseTransfer(), c.leaseSteal(), c.leaseHistory(), c.leaseCampaign())
	return cmd
}

// heldSomewhere refuses a handover when nobody holds the lease, or when this device is
// named in the record but may not sign now. Asked of a standby, the handover goes to the
// holder (the node forwards it); via names the holder for the report line.
func heldSomewhere(st node.State, what string) (via string, err error) {
	switch {
	case st.Lease.HeldByMe:
		return "", nil
	case st.Lease.Holder == "":
		return "", fmt.Errorf("nobody holds the lease (released, epoch %d): nothing to %s", st.Lease.Epoch, what)
	case st.Lease.Holder == st.ID:
		return "", fmt.Errorf("this device (%s) is named in the lease record but may not sign now (its hold lapsed or is not confirmed yet): try again in a moment", shortPeer(st.ID))
	}
	return fmt.Sprintf(" (asked of the holder %s)", shortPeer(st.Lease.Holder)), nil
}

func (c *cli) leaseRelease() *cobra.Command {
	cmd := &cobra.Command{Use: "release", Short: "make the holder give the lease up; a standby claims it at once", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Second, "waiting for the cluster")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cl, st, ctx, done, err := f.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		via, err := heldSomewhere(st, "release")
		if err != nil {
			return err
		}
		if err := cl.HolderRelease(ctx); err != nil {
			return f.apiErr(err)
		}
		fmt.Fprintf(c.stdout, "released (epoch %d)%s; a standby claims it at once\n", st.Lease.Epoch, via)
		return nil
	}
	return cmd
}

func (c *cli) leaseTransfer() *cobra.Command {
	cmd := &cobra.Command{Use: "transfer --to PEER", Short: "make the holder hand the lease to a named member", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Second, "waiting for the cluster")
	to := cmd.Flags().String("to", "", "the member to hand the lease to: a peer `ID`, or an unambiguous prefix or …suffix of one")
	_ = cmd.RegisterFlagCompletionFunc("to", c.completePeers(f))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *to == "" {
			return usagef("--to PEER is required")
		}
		cl, st, ctx, done, err := f.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		target, err := resolvePeer(st, *to, "--to")
		if err != nil {
			return err
		}
		if target == st.Lease.Holder && st.Lease.HeldByMe {
			return usagef("--to %s is this device, which holds the lease already", shortPeer(target))
		}
		if target == st.Lease.Holder {
			return usagef("--to %s holds the lease already", shortPeer(target))
		}
		via, err := heldSomewhere(st, "transfer")
		if err != nil {
			return err
		}
		if err := cl.HolderTransfer(ctx, target); err != nil {
			return f.apiErr(err)
		}
		fmt.Fprintf(c.stdout, "transferred to %s (%s) at epoch %d%s\n", shortPeer(target), target, st.Lease.Epoch+1, via)
		return nil
	}
	return cmd
}

func (c *cli) leaseSteal() *cobra.Command {
	cmd := &cobra.Command{Use: "steal --reason TEXT", Short: "take the lease by force on this device (a wedged holder)", Args: noArgs,
		Long: `Takes the lease by force on this device (epoch+1): for a holder that is wedged (hung,
frozen, unreachable) and does not lapse by itself. The apply's fencing keeps the chain
fork-free: the prior holder's commits at its epoch are refused. The reason goes into
the lease history.`}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Second, "waiting for the cluster")
	reason := cmd.Flags().String("reason", "", "why (recorded in the lease history)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if strings.TrimSpace(*reason) == "" {
			return usagef("--reason TEXT is required: say why you override the holder")
		}
		cl, before, ctx, done, err := f.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		if err := cl.Steal(ctx, *reason); err != nil {
			return f.apiErr(err)
		}
		prior := before.Lease.Holder
		if h, err := cl.LeaseHistory(ctx, api.HistoryFilter{Events: []string{"steal"}}); err == nil {
			for i := len(h) - 1; i >= 0; i-- {
				if h[i].Holder == before.ID {
					fmt.Fprintf(c.stdout, "stole the lease at epoch %d; prior holder: %s\n", h[i].Epoch, orNone(h[i].Prior))
					return nil
				}
			}
		}
		fmt.Fprintf(c.stdout, "stole the lease; prior holder: %s\n", orNone(prior))
		return nil
	}
	return cmd
}

const historyLong = `Prints the lease's audit trail (the last 1024 lease entries), oldest first. By default
runs of renewals are folded into one line ("renew ×N"); --renewals prints each,
--event keeps only the named events (claim, renew, release, transfer, steal), --since
keeps the recent ones (a duration like 1h, or an RFC 3339 time). A release entry
carries no time of its own: its TIME column says so and shows the last renewal's.
--json prints the API's objects (snake_case, as GET /v1/lease/history).`

func (c *cli) leaseHistory() *cobra.Command {
	cmd := &cobra.Command{Use: "history [--event E,...] [--since D] [--renewals] [--json]", Short: "the lease's audit trail",
		Long: historyLong, Example: "  baton lease history --data /tmp/b1 --event claim,transfer,steal --since 30m", Args: noArgs}
	fs := cmd.Flags()
	f := c.addAPIFlags(fs, 10*time.Second, "waiting for the node")
	events := fs.StringSlice("event", nil, "only these `events` (claim, renew, release, transfer, steal), comma-separated")
	since := fs.String("since", "", "only events since `WHEN`: a duration ago (30m) or an RFC 3339 time")
	renewals := fs.Bool("renewals", false, "print every renewal (default: fold runs of renewals into one line)")
	asJSON := fs.Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var filt api.HistoryFilter
		filt.Events = *events
		if *since != "" {
			if d, err := time.ParseDuration(*since); err == nil && d > 0 {
				filt.Since = time.Now().Add(-d)
			} else if t, err := time.Parse(time.RFC3339, *since); err == nil {
				filt.Since = t
			} else {
				return usagef("--since %q: want a duration (30m) or an RFC 3339 time", *since)
			}
		}
		for _, e := range filt.Events {
			switch e {
			case "claim", "renew", "release", "transfer", "steal":
			default:
				return usagef("--event %q: want claim, renew, release, transfer or steal", e)
			}
		}
		cl, ctx, done, err := f.open(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		h, err := cl.LeaseHistory(ctx, filt)
		if err != nil {
			return f.apiErr(err)
		}
		if *asJSON {
			if h == nil {
				h = []api.LeaseEventJSON{}
			}
			return printJSON(c.stdout, h)
		}
		fold := !*renewals && len(filt.Events) == 0
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "INDEX\tTIME\tEVENT\tEPOCH\tHOLDER\tPRIOR\tREASON")
		const layout = "2006-01-02 15:04:05.000"
		for i := 0; i < len(h); i++ {
			e := h[i]
			if fold && e.Event == "renew" {
				j := i
				for j+1 < len(h) && h[j+1].Event == "renew" && h[j+1].Holder == e.Holder && h[j+1].Epoch == e.Epoch {
					j++
				}
				if j > i {
					fmt.Fprintf(tw, "%d-%d\t%s … %s\trenew ×%d\t%d\t%s\t\t\n", e.Index, h[j].Index, time.UnixMilli(e.TS).Format(layout),
						time.UnixMilli(h[j].TS).Format("15:04:05.000"), j-i+1, e.Epoch, e.Holder)
					i = j
					continue
				}
			}
			when := time.UnixMilli(e.TS).Format(layout)
			if e.TS == 0 {
				when = "(no time; last renewal " + time.UnixMilli(e.LeaseTS).Format("15:04:05.000") + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Index, when, e.Event, e.Epoch, orNone(e.Holder), e.Prior, e.Reason)
		}
		return tw.Flush()
	}
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
