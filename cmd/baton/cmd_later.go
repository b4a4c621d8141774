package main

import (
	"context"
	"io"

	"github.com/batonhq/baton/testnet"
	"github.com/batonhq/baton/testnet/bench"
)

// drillMain and benchMain are the entry points `baton drill` and `baton bench` dispatch
// to (they own their flags and help). nil means not built yet.
var (
	drillMain = testnet.DrillMain
	benchMain = bench.Main
)

func cmdDrill(ctx context.Context, c *cli, args []string) error {
	return dispatch(ctx, c, drillMain, args, "drills arrive with testnet")
}

func cmdBench(ctx context.Context, c *cli, args []string) error {
	return dispatch(ctx, c, benchMain, args, "benchmarks arrive with testnet/bench")
}

func dispatch(ctx context.Context, c *cli, main func(context.Context, []string, io.Writer, io.Writer) int, args []string, later string) error {
	if main == nil {
		return &exitError{code: 2, msg: "not built yet (" + later + ")"}
	}
	if code := main(ctx, args, c.stdout, c.stderr); code != 0 {
		return &exitError{code: code}
	}
	return nil
}
