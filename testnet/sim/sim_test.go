package sim

import (
	"fmt"
	"os"
	"testing"
)

// TestSim runs the seeds (-seeds, from -first) in parallel and fails on any
// violation, printing each with its replay command; -seed N replays one seed.
func TestSim(t *testing.T) {
	if *flagSeed >= 0 && *flagRepeat > 1 {
		cfg := flagConfig(t, *flagSeed)
		t.Log(Reproduce(t, cfg, *flagRepeat))
		return
	}
	if *flagSeed >= 0 {
		cfg := flagConfig(t, *flagSeed)
		if *flagEvents {
			cfg.Trace = func(e Event) { fmt.Fprintln(os.Stderr, e) }
		}
		res := Run(t, cfg)
		t.Log(res.Summary())
		writeFiles(t, res)
		if !res.OK() {
			t.Error(res.Report())
		}
		return
	}
	n := defaultSeeds()
	for i := range n {
		seed := *flagFirst + int64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			res := Run(t, flagConfig(t, seed))
			t.Log(res.Summary())
			writeFiles(t, res)
			if !res.OK() {
				t.Error(res.Report())
			}
		})
	}
}

func writeFiles(t *testing.T, res *Result) {
	if *flagOut == "" {
		return
	}
	if err := res.WriteFiles(*flagOut); err != nil {
		t.Error(err)
	}
}
