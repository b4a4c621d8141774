package sim

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// The flags of `go test ./testnet/sim` (after the package path):
//
//	-seed N       replay one seed (verbose: every violation with its events)
//	-seeds N      how many seeds TestSim runs (default 500; 20 with -race, 50 with -short)
//	-first N      the first of them (default 1)
//	-time D       virtual duration of each seed's fault phase (default 10s)
//	-profile P    fault mix and load (default: from the seed); see ProfileNames
//	-nodes N      devices, 3 to 5 (default: from the seed)
//	-ttl D, -tick D
//	-knobs K      put fixed bugs back, e.g. epoch-only-claim,dedupe-count=64
//	-format F     the chain's commit format: baton (default) or atproto
//	-events       print every event of a replayed seed as it happens
//	-keep         keep the data directories
//	-out DIR      write each failed seed's report and all its events there
//	-long         run the long schedules (TestFindsBugC: the old window size, 75,000 intents, no knob;
//	              TestCloneLimit: 32 seeds)
//	-repeat N     with -seed: replay N times, count how often each violation kind comes back
//	              (go test's own -cpu 1 runs them with GOMAXPROCS=1)
//	-known K,K    violation kinds TestSim only logs (while a bug they stand for is being fixed)
var (
	flagSeed     = flag.Int64("seed", -1, "replay this seed only")
	flagSeeds    = flag.Int("seeds", 0, "number of seeds TestSim runs (0: 500; 20 with -race; 50 with -short)")
	flagFirst    = flag.Int64("first", 1, "first seed TestSim runs")
	flagTime     = flag.Duration("time", 0, "virtual duration of each seed's fault phase (0: 8s, or the profile's)")
	flagProfile  = flag.String("profile", "", "fault mix and load (default: from the seed)")
	flagNodes    = flag.Int("nodes", 0, "devices, 3 to 5 (default: from the seed)")
	flagTTL      = flag.Duration("ttl", 0, "lease TTL (default 1s)")
	flagTick     = flag.Duration("tick", 0, "signer tick (default 100ms)")
	flagKnobs    = flag.String("knobs", "", "knobs that put fixed bugs back (epoch-only-claim, dedupe-count=N, unsealed-raft, skip-validation, resign-refused, trust-refusal, unbounded-log-time, shared-stamp, no-fence, rebootstrap, fence-filters-only, barrier-nudges, no-send-ahead, early-unacked)")
	flagEvents   = flag.Bool("events", false, "print every event of a replayed seed")
	flagKeep     = flag.Bool("keep", false, "keep the data directories")
	flagOut      = flag.String("out", "", "write each failed seed's report and events into this directory")
	flagLong     = flag.Bool("long", false, "run the long schedules (TestFindsBugC without its knob, TestCloneLimit)")
	flagSeedRand = flag.Bool("seedrand", true, "with -seed: seed math/rand's global source (Raft's election timeouts) from the seed")
	flagRepeat   = flag.Int("repeat", 1, "with -seed: replay it this many times and count how often each violation comes back")
	flagFormat   = flag.String("format", "", "the chain's commit format: baton (default) or atproto")
	flagKnown    = flag.String("known", "", "violation kinds TestSim logs without failing (while the bugs they stand for are being fixed)")
)

// flagConfig is the Config the flags describe for seed.
func flagConfig(t testing.TB, seed int64) Config {
	k, err := ParseKnobs(*flagKnobs)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Seed: seed, Devices: *flagNodes, Duration: *flagTime, Profile: *flagProfile, TTL: *flagTTL,
		Tick: *flagTick, Knobs: k, Keep: *flagKeep, Format: *flagFormat, SeedGlobalRand: *flagSeed >= 0 && *flagSeedRand}
}

func defaultSeeds() int {
	switch {
	case *flagSeeds > 0:
		return *flagSeeds
	case raceEnabled:
		return 20
	case testing.Short():
		return 50
	}
	return 500
}

// failRunsEnv makes a worker fail each run as the testing package fails one in which
// the race detector found a race (TestWorkerSaysWhyARunDidNotComplete).
const failRunsEnv = "BATON_SIM_TEST_FAIL_RUNS"

func TestMain(m *testing.M) {
	flag.Parse()
	// Workers (TestSim's, findsBug's, a harness child's) are this binary again, as
	// `baton sim` (below).
	workerCommand = func(args []string) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), harnessEnv+"="+strings.Join(args, " "))
		return cmd, nil
	}
	if _, ok := os.LookupEnv(failRunsEnv); ok {
		workerRunHook = func(t *testing.T, seed int64) bool {
			fmt.Fprintf(os.Stderr, "WARNING: DATA RACE (a stand-in, seed %d)\n", seed)
			t.Fail()
			return false
		}
	}
	if args, ok := os.LookupEnv(harnessEnv); ok {
		os.Exit(Main(context.Background(), strings.Fields(args), os.Stdout, os.Stderr))
	}
	if os.Getenv("GOGC") == "" {
		// The runs allocate a lot and keep little: collect less often.
		debug.SetGCPercent(gcPercent)
	}
	os.Exit(m.Run())
}
