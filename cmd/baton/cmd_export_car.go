package main

import (
	"bufio"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer/chain/atproto"
)

type carFlags struct {
	on    bool
	chain string
}

func addCARFlags(cmd *cobra.Command) *carFlags {
	c := &carFlags{}
	cmd.Flags().BoolVar(&c.on, "car", false, "on an atproto chain: write the whole repository as a CAR file instead (rebuilt and checked from the commits)")
	cmd.Flags().StringVar(&c.chain, "chain", "", "with --car: the chain key's did:key the commits must verify under (default: the first commit's)")
	return c
}

// exportCAR streams the chain from seq 1, replays every commit through the atproto
// format's checks (signature, links, prevData, rev order, the recomputed MST root)
// and writes the repository at the head as a CAR v1 file. Any replica gives the
// same bytes.
func (c *cli) exportCAR(cmd *cobra.Command, f *apiFlags, car *carFlags) error {
	ctx := cmd.Context()
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	sctx, cancel := f.ctx(ctx)
	defer cancel()
	rp := atproto.NewReplayer(car.chain)
	n := 0
	for ac := range cl.Commits(sctx, 1, false) {
		if ac.Err != nil {
			return f.apiErr(ac.Err)
		}
		if _, err := rp.Next(ac.Raw); err != nil {
			return fmt.Errorf("export --car: commit seq %d: %w (is this an atproto chain?)", ac.Seq, err)
		}
		n++
	}
	if err := sctx.Err(); err != nil {
		return f.apiErr(err)
	}
	if n == 0 {
		return fmt.Errorf("export --car: the chain is empty")
	}
	w := bufio.NewWriter(c.stdout)
	if err := rp.WriteCAR(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	h := rp.Head()
	fmt.Fprintf(c.stderr, "repository %s at rev %s: %d commits\n", h.DID, h.Rev, n)
	return nil
}
