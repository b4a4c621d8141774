package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer/api"
)

const healthLong = `Checks this device's health (GET /healthz) and, with --cluster, every member's
(etcdctl endpoint health --cluster): the node asks each member of the Raft
configuration at once and prints one line per member: healthy or its problem
(catching up, diverged, storage, identity, clone, or unreachable), its Raft role,
term and applied index, and the chain's head as it sees it. Exit status 0 when every
device asked is healthy, 1 otherwise (for scripts and probes).`

const healthExample = `  baton health --data /tmp/b1
  baton health --data /tmp/b1 --cluster
  baton health --cluster --json | jq '.members[] | select(.healthy | not)'`

func (c *cli) healthCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "health [--cluster] [--json]", Short: "check this device's health, or every member's (--cluster); exit 1 when unhealthy",
		Long: healthLong, Example: healthExample, Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Second, "waiting for the node")
	cluster := cmd.Flags().Bool("cluster", false, "ask every member of the cluster through this device")
	asJSON := cmd.Flags().Bool("json", false, "print JSON (GET /v1/health/cluster with --cluster)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cl, cctx, done, err := f.open(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		if !*cluster {
			herr := cl.Health(cctx)
			if herr != nil && !isUnhealthy(herr) {
				return f.apiErr(herr)
			}
			if *asJSON {
				ans := map[string]any{"healthy": herr == nil}
				if herr != nil {
					ans["problem"] = api.Message(herr)
				}
				if err := printJSON(c.stdout, ans); err != nil {
					return err
				}
			} else if herr == nil {
				fmt.Fprintln(c.stdout, "healthy")
			}
			if herr != nil {
				return &exitError{code: 1, msg: "unhealthy: " + api.Message(herr)}
			}
			return nil
		}
		h, err := cl.ClusterHealth(cctx)
		if err != nil {
			return f.apiErr(err)
		}
		if *asJSON {
			if err := printJSON(c.stdout, h); err != nil {
				return err
			}
		} else {
			printClusterHealth(c.stdout, h)
		}
		if !h.Healthy {
			bad := 0
			for _, m := range h.Members {
				if !m.Healthy {
					bad++
				}
			}
			return &exitError{code: 1, msg: fmt.Sprintf("%d of %d members unhealthy or unreachable", bad, len(h.Members))}
		}
		return nil
	}
	return cmd
}

// isUnhealthy: the node answered /healthz with its problem (503 unhealthy), as
// opposed to not answering.
func isUnhealthy(err error) bool {
	var ae *api.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable
}

func printClusterHealth(w io.Writer, h api.ClusterHealth) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tHEALTH\tRAFT\tTERM\tAPPLIED\tHEAD\tTOOK")
	for _, m := range h.Members {
		health := "healthy"
		if !m.Healthy {
			health = m.ProblemKind
			if health == "" {
				health = "unhealthy"
			}
			health += ": " + m.Problem
		}
		who := named(m.ID, m.Name)
		if m.Self {
			who += " (this device)"
		}
		role := m.Role
		if m.Holder {
			role += ",holder"
		}
		if !m.Voter {
			role += ",non-voter"
		}
		took := "-"
		if !m.Self && m.Reached {
			took = (time.Duration(m.TookMs) * time.Millisecond).String()
		}
		if !m.Reached {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\n", who, health)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", who, health, role, m.Term, m.Applied, m.HeadSeq, took)
	}
	tw.Flush()
	if h.Healthy {
		fmt.Fprintln(w, "cluster healthy")
	}
}
