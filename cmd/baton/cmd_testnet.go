package main

import (
	"context"

	"github.com/batonhq/baton/testnet"
	"github.com/batonhq/baton/testnet/bench"
)

// `baton drill` and `baton bench` dispatch to testnet and testnet/bench, which own
// their flags and help.

func cmdDrill(ctx context.Context, c *cli, args []string) error {
	return exitCode(testnet.DrillMain(ctx, args, c.stdout, c.stderr))
}

func cmdBench(ctx context.Context, c *cli, args []string) error {
	return exitCode(bench.Main(ctx, args, c.stdout, c.stderr))
}

// exitCode turns a sub-main's exit status into the command's error (nil for 0).
func exitCode(code int) error {
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}
