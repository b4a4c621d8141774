package sim

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSim runs -seeds seeds from -first (500 by default) and fails on every
// violation, printing the seed, the replay command and the events before it. The
// seeds run in worker processes (this test binary again, one seed at a time each on
// one P, Raft's random source seeded: as `baton sim` runs them), so that a finding
// replays with the command it prints. -seed N replays one seed in this process.
func TestSim(t *testing.T) {
	if *flagSeed >= 0 && *flagRepeat > 1 {
		t.Log(Reproduce(t, flagConfig(t, *flagSeed), *flagRepeat))
		return
	}
	if *flagSeed >= 0 {
		cfg := flagConfig(t, *flagSeed)
		if *flagEvents {
			cfg.Trace = func(e Event) { fmt.Fprintln(os.Stderr, e) }
		}
		res := Run(t, cfg)
		t.Log(res.Summary())
		if *flagOut != "" {
			if err := res.WriteFiles(*flagOut); err != nil {
				t.Error(err)
			}
		}
		if !res.OK() {
			t.Error(res.Report())
		}
		return
	}
	known, err := knownKinds()
	if err != nil {
		t.Fatal(err)
	}
	o := SearchOptions{Base: flagConfig(t, 0), First: *flagFirst, Seeds: defaultSeeds(), Out: *flagOut}
	sum := searchInWorkers(context.Background(), o)
	t.Logf("%s", sum)
	if sum.Seeds != o.Seeds {
		t.Errorf("%d of %d seeds ran", sum.Seeds, o.Seeds)
	}
	reportFailures(t, sum, known)
}

// reportFailures fails t for every failed seed (the first few in full), but for
// violations of the known kinds, which it only logs.
func reportFailures(t *testing.T, sum *SearchSummary, known []string) {
	const full = 5
	shown, tolerated := 0, 0
	for _, seed := range sortedSeeds(sum.Results) {
		res := sum.Results[seed]
		var kept []Violation
		for _, v := range res.Violations {
			if !slices.Contains(known, v.Kind) {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			tolerated++
			continue
		}
		r := *res
		r.Violations = kept
		if shown < full {
			t.Errorf("%s\n%s", r.Summary(), r.Report())
		} else {
			t.Errorf("%s\n  replay: %s", r.Summary(), r.Config.ReplayCommand())
		}
		shown++
	}
	if tolerated > 0 {
		t.Logf("%d seeds found only violations of the known kinds %v (-known)", tolerated, known)
	}
}

func sortedSeeds(m map[int64]*Result) []int64 {
	var out []int64
	for s := range m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func knownKinds() ([]string, error) {
	var out []string
	for _, k := range strings.Split(*flagKnown, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out, nil
}
