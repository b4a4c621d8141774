package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

const repairLong = `Re-syncs a device whose Raft log or state is corrupt (its start refused with a
"corrupt" error naming raft.db, or its status says its state differs from the other
replicas'). The device must be stopped. repair keeps the device's keys and Raft's
term and vote, and sets aside the log, the state and the snapshots (raft.db is kept
as raft.db.corrupt); started again (baton run, the founding device too), the device
re-syncs from the other members by a snapshot and the log.

Until it has caught up, the repaired device neither votes nor campaigns (status shows
"re-sync"): it cannot help elect a leader that lacks an entry it had acknowledged, so
nothing the cluster acknowledged is lost. While the members that hold the history
are down, it waits for them.

Repair one device at a time, and only while a majority of the others are healthy:
they hold the history. repair refuses on a device that knows no other member. If
every member was repaired, none holds the history: each waits, and none may be
bootstrapped again (that starts a second history of the chain).`

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
		others, err := transport.KnownMembers(*data)
		if err != nil {
			return err
		}
		if len(others) == 0 {
			return fmt.Errorf("repair %s: this device knows no other member (%s), so no one else holds the chain's history "+
				"and a repair would destroy the only copy: restore this data dir from a backup instead", *data, transport.AddrBookFile)
		}
		if err := node.MarkRejoin(*data, "baton repair"); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		if err := intentlog.Repair(*data); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "repaired %s: start it (baton run --data %s); it re-syncs from the other members and votes again once it has caught up\n", *data, *data)
		return nil
	}
	return cmd
}
