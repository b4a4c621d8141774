package sim

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSimAtproto runs seeds on an atproto chain (format.go: P-256 chain key, DAG-CBOR
// records, clocks that start up to two minutes apart, the repository checks at the
// end): seeds 1 to 6 of their default profiles (mixed; seed 5 clocks, whose wall
// clocks jump by minutes to days) must find nothing. Under -race, one short seed in
// this process.
func TestSimAtproto(t *testing.T) {
	if raceEnabled {
		res := Run(t, Config{Seed: 5, Format: FormatAtproto, Duration: 3 * time.Second})
		if !res.OK() {
			t.Fatalf("%s\n%s", res.Summary(), res.Report())
		}
		t.Log(res.Summary())
		return
	}
	n := 6
	if testing.Short() {
		n = 3
	}
	o := SearchOptions{Base: Config{Format: FormatAtproto}, First: 1, Seeds: n, Parallel: 1}
	sum := searchInWorkers(context.Background(), o)
	t.Logf("%s", sum)
	if sum.Seeds != n {
		t.Errorf("%d of %d seeds ran", sum.Seeds, n)
	}
	for _, seed := range sortedSeeds(sum.Results) {
		if r := sum.Results[seed]; r.Commits == 0 || r.Config.Format != FormatAtproto {
			t.Errorf("seed %d: %d commits, format %q", seed, r.Commits, r.Config.Format)
		}
	}
	reportFailures(t, sum, nil)
}

// TestFindsUnboundedRev: on an atproto chain, revs taken from the holder's clock
// without signer.MaxRevAhead's bound (knob unbounded-rev) follow a clock that jumped
// forward, and the run's relay check refuses them (future_rev); with the bound, the
// same seeds find nothing of the kind.
func TestFindsUnboundedRev(t *testing.T) {
	c := bugCase{profile: "clocks", format: FormatAtproto, knobs: Knobs{UnboundedRev: true}, first: 1, seeds: 2,
		kinds: []string{VFutureRev}}
	findsBug(t, c)
	c.knobs = Knobs{}
	findsNoBug(t, c)
}

func TestConfigFormat(t *testing.T) {
	c := Config{Seed: 3, Format: FormatAtproto}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := c.ReplayCommand(); !strings.Contains(got, "-format atproto") || !strings.Contains(got, "--format atproto") {
		t.Errorf("replay command %q does not name the format", got)
	}
	c = Config{Seed: 3, Format: "plc"}
	if err := c.setDefaults(); err == nil {
		t.Error("format plc accepted")
	}
}
