package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/device"
)

const repairLong = `Re-syncs a device whose Raft log or state is corrupt (its start refused with a
"corrupt" error naming raft.db, or its status says its state differs from the other
replicas'). The device must be stopped. repair keeps the device's keys and Raft's
term and vote, and sets aside the log, the state and the snapshots (raft.db is kept
as raft.db.corrupt); started again, the device re-syncs from the other members by a
snapshot and the log. Nothing the cluster acknowledged is lost: the others hold it.`

func (c *cli) repairCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "repair [--data DIR]", Short: "re-sync a device whose Raft log or state is corrupt (it must be stopped)",
		Long: repairLong, Example: "  baton repair --data ~/.baton && baton run --data ~/.baton", Args: noArgs}
	data := dataFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if _, err := device.Open(*data); err != nil {
			return err
		}
		unlock, err := lockDataDir(*data)
		if err != nil {
			return fmt.Errorf("%w (stop the device first)", err)
		}
		defer unlock()
		if err := intentlog.Repair(*data); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "repaired %s: start it (baton run --data %s) and it re-syncs from the other members\n", *data, *data)
		return nil
	}
	return cmd
}
