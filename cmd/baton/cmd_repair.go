package main

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/intentlog"
)

const repairUsage = `Usage: baton repair [--data DIR]

Re-syncs a device whose Raft log or state is corrupt (its start refused with a
"corrupt" error naming raft.db, or its status says its state differs from the other
replicas'). The device must be stopped. repair keeps the device's keys and Raft's
term and vote, and sets aside the log, the state and the snapshots (raft.db is kept
as raft.db.corrupt); started again, the device re-syncs from the other members by a
snapshot and the log. Nothing the cluster acknowledged is lost: the others hold it.

Example:
  baton repair --data ~/.baton && baton run --data ~/.baton
`

func cmdRepair(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("repair", repairUsage)
	data := dataFlag(fs)
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	if _, err := loadDevice(*data); err != nil {
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
