package testnet

import (
	"context"
	"fmt"
)

// ProcsConfig configures a multi-process drill.
type ProcsConfig struct {
	DrillConfig
	// Bin is the baton binary (default: this executable).
	Bin string
}

// RunProcsScenario runs a scenario with one real `baton run` process per device.
func RunProcsScenario(ctx context.Context, cfg ProcsConfig) (Report, error) {
	return Report{}, fmt.Errorf("%w: not available yet", ErrProcsUnavailable)
}
