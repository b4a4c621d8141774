package main

import (
	"context"

	"github.com/batonhq/baton/testnet/sim"
)

// cmdSim is `baton sim`: the simulator's search over seeds, or the replay of one
// (testnet/sim.Main owns its flags and help).
func cmdSim(ctx context.Context, c *cli, args []string) error {
	return exitCode(sim.Main(ctx, args, c.stdout, c.stderr))
}
