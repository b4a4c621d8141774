package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flag "github.com/spf13/pflag"
)

// SearchOptions configure a search: many seeds, run Parallel at a time.
type SearchOptions struct {
	// Base is the configuration of every run; its Seed is ignored.
	Base Config
	// First is the first seed; Seeds how many (0: until For has passed).
	First int64
	Seeds int
	// For bounds the search in wall-clock time: no seed starts after it (0: none;
	// Seeds and For cannot both be 0).
	For time.Duration
	// Parallel seeds run at once (0: GOMAXPROCS).
	Parallel int
	// Out, if set, gets each failed seed's report and events (Result.WriteFiles) and
	// a file "inflight" naming the seeds running (if the process dies, they are the
	// suspects).
	Out string
	// Progress is the interval of the progress line on Log (0: none).
	Progress time.Duration
	Log      io.Writer

	stop <-chan struct{} // closed: start no more seeds
}

func defaultParallel() int { return runtime.GOMAXPROCS(0) }

// gcPercent is the GOGC of simulation processes: runs allocate much and keep little.
const gcPercent = 400

// SearchSummary is what a search found.
type SearchSummary struct {
	Seeds     int
	Failed    int
	Wall      time.Duration
	Virtual   time.Duration     // simulated, summed over the seeds
	Faults    map[string]int    // injected, by kind
	Found     map[string]int    // violations, by kind
	FirstSeed map[string]int64  // the first seed (lowest) that found each kind
	Results   map[int64]*Result // the failed seeds' results
	Replay    map[int64]string  // the failed seeds' replay commands
	Net       map[string]uint64 // messages dropped, duplicated, held, in all
	Failovers []time.Duration   // the probe's failover of each seed
	// RaftFutureLeaks sums Result.RaftFutureLeaks; RaftLeakSeeds names the first
	// seeds that had one.
	RaftFutureLeaks   int
	RaftTransferLeaks int // sums Result.RaftTransferLeaks
	RaftLeakSeeds     []int64
}

// PerMinute is the search's rate.
func (s *SearchSummary) PerMinute() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(s.Seeds) / s.Wall.Minutes()
}

// String is the summary for a person.
func (s *SearchSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d seeds in %v (%.1f seeds/min, %v simulated), %d with violations\n",
		s.Seeds, s.Wall.Round(time.Second), s.PerMinute(), s.Virtual.Round(time.Second), s.Failed)
	fmt.Fprintf(&b, "faults injected: %d (%s)\n", sum(s.Faults), kv(s.Faults))
	fmt.Fprintf(&b, "messages: %s\n", kv64(s.Net))
	if len(s.Failovers) > 0 {
		fo := append([]time.Duration(nil), s.Failovers...)
		sort.Slice(fo, func(i, j int) bool { return fo[i] < fo[j] })
		fmt.Fprintf(&b, "failover after the faults (probe signed): median %v, p99 %v, max %v\n",
			fo[len(fo)/2].Round(time.Millisecond), fo[len(fo)*99/100].Round(time.Millisecond), fo[len(fo)-1].Round(time.Millisecond))
	}
	if s.RaftFutureLeaks > 0 || s.RaftTransferLeaks > 0 {
		fmt.Fprintf(&b, "not violations: %d goroutines left waiting on a hashicorp/raft future after Shutdown (hashicorp/raft#498), %d of a stuck leadership transfer (hashicorp/raft#696), seeds %v\n",
			s.RaftFutureLeaks, s.RaftTransferLeaks, s.RaftLeakSeeds)
	}
	if len(s.Found) == 0 {
		b.WriteString("violations: none\n")
		return b.String()
	}
	b.WriteString("violations:\n")
	for _, k := range sortedKeys(s.Found) {
		seed := s.FirstSeed[k]
		fmt.Fprintf(&b, "  %-16s %d (first: seed %d; replay: %s)\n", k, s.Found[k], seed, s.Replay[seed])
	}
	return b.String()
}

func kv(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func kv64(m map[string]uint64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Search runs the seeds of o inside t, each a subtest in its own synctest bubble,
// o.Parallel at a time, and returns what they found (the in-process search of
// `go test`; `baton sim` runs its seeds in worker processes instead, see workers.go).
func Search(t *testing.T, o SearchOptions) *SearchSummary {
	return search(o, func(_ int, cfg Config) *Result {
		var res *Result
		t.Run(fmt.Sprint(cfg.Seed), func(t *testing.T) { res = Run(t, cfg) })
		return res
	})
}

// search is the loop of a search: o.Parallel goroutines (worker i always calls run
// with i) take the next seed until the seeds or the time run out. Goroutines calling
// t.Run in turn, not parallel subtests: t.Parallel would start no subtest before the
// loop creating them returns, and a search bounded by time has no end to wait for.
func search(o SearchOptions, run func(worker int, cfg Config) *Result) *SearchSummary {
	if o.Parallel <= 0 {
		o.Parallel = defaultParallel()
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	s := &SearchSummary{Faults: map[string]int{}, Found: map[string]int{}, FirstSeed: map[string]int64{},
		Results: map[int64]*Result{}, Replay: map[int64]string{}, Net: map[string]uint64{}}
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	inflight := map[int64]bool{}
	writeInflight := func() {
		if o.Out == "" {
			return
		}
		var seeds []string
		for seed := range inflight {
			seeds = append(seeds, fmt.Sprint(seed))
		}
		sort.Strings(seeds)
		_ = os.MkdirAll(o.Out, 0o755)
		_ = os.WriteFile(filepath.Join(o.Out, "inflight"), []byte(strings.Join(seeds, "\n")+"\n"), 0o644)
	}
	more := func(i int64) bool {
		if o.Seeds > 0 && i >= int64(o.Seeds) {
			return false
		}
		select {
		case <-o.stop:
			return false
		default:
		}
		return o.For <= 0 || time.Since(start) < o.For
	}
	stopProgress := make(chan struct{})
	var progressWG sync.WaitGroup
	if o.Progress > 0 {
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			tk := time.NewTicker(o.Progress)
			defer tk.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-tk.C:
				}
				mu.Lock()
				wall := time.Since(start)
				fmt.Fprintf(o.Log, "sim: %d seeds in %v (%.1f/min), %d with violations%s, %d faults\n", s.Seeds,
					wall.Round(time.Second), float64(s.Seeds)/wall.Minutes(), s.Failed, foundText(s.Found), sum(s.Faults))
				mu.Unlock()
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range o.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if !more(i) {
					return
				}
				cfg := o.Base
				cfg.Seed = o.First + i
				mu.Lock()
				inflight[cfg.Seed] = true
				writeInflight()
				mu.Unlock()
				res := run(w, cfg)
				mu.Lock()
				delete(inflight, cfg.Seed)
				writeInflight()
				if res != nil {
					if !res.OK() && o.Out != "" && len(res.Events) > 0 {
						_ = res.WriteFiles(o.Out)
					}
					s.add(res)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	progressWG.Wait()
	s.Wall = time.Since(start)
	return s
}

func (s *SearchSummary) add(r *Result) {
	s.Seeds++
	s.Virtual += r.Virtual
	for k, n := range r.Faults {
		s.Faults[k] += n
	}
	s.Net["dropped"] += r.Net.DroppedCut + r.Net.DroppedLoss + r.Net.DroppedDown
	for c := range numClasses {
		s.Net["duplicated"] += r.Net.Duplicated[c]
		s.Net["held"] += r.Net.Held[c]
		s.Net["sent"] += r.Net.Sent[c]
	}
	if r.Failover >= 0 {
		s.Failovers = append(s.Failovers, r.Failover)
	}
	if r.RaftFutureLeaks > 0 || r.RaftTransferLeaks > 0 {
		s.RaftFutureLeaks += r.RaftFutureLeaks
		s.RaftTransferLeaks += r.RaftTransferLeaks
		if len(s.RaftLeakSeeds) < 20 {
			s.RaftLeakSeeds = append(s.RaftLeakSeeds, r.Config.Seed)
			slices.Sort(s.RaftLeakSeeds)
		}
	}
	if r.OK() {
		return
	}
	s.Failed++
	r.Events = nil // written out already, if at all: keep the summary small
	s.Results[r.Config.Seed] = r
	s.Replay[r.Config.Seed] = r.Config.ReplayCommand()
	kinds := map[string]int{}
	for _, v := range r.Violations {
		kinds[v.Kind] = max(kinds[v.Kind], r.Found[v.Kind], 1)
	}
	for k, n := range kinds {
		s.Found[k] += n
		if first, ok := s.FirstSeed[k]; !ok || r.Config.Seed < first {
			s.FirstSeed[k] = r.Config.Seed
		}
	}
}

func foundText(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return " (" + kv(m) + ")"
}

// Reproduce replays cfg n times, one after the other, and reports how many of the
// runs found each violation kind: the replay's reproduction rate (goroutine
// interleavings in a bubble are not deterministic; the schedule is).
func Reproduce(t *testing.T, cfg Config, n int) string {
	found := map[string]int{}
	var lines []string
	for i := range n {
		res := Run(t, cfg)
		kinds := map[string]bool{}
		for _, v := range res.Violations {
			kinds[v.Kind] = true
		}
		for k := range kinds {
			found[k]++
		}
		lines = append(lines, fmt.Sprintf("  run %d: %s", i+1, res.Summary()))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d replayed %d times (GOMAXPROCS %d):\n%s\n", cfg.Seed, n, runtime.GOMAXPROCS(0), strings.Join(lines, "\n"))
	if len(found) == 0 {
		b.WriteString("no violation in any run\n")
	}
	for _, k := range sortedKeys(found) {
		fmt.Fprintf(&b, "%s: %d of %d runs (%.0f%%)\n", k, found[k], n, 100*float64(found[k])/float64(n))
	}
	return b.String()
}

// ErrNoHarness: this build cannot run the simulator outside `go test` (see
// testmain_go126.go).
var ErrNoHarness = errors.New("sim: this build of baton has no test harness for the simulator " +
	"(it needs the Go 1.26 testing.MainStart); run `go test ./testnet/sim` instead")

// Main is `baton sim`: a search over many seeds with a progress line and a summary,
// or the replay of one seed. It runs the simulator under a *testing.T of its own
// (synctest.Test needs one) through withT. Exit status: 0 nothing found, 1
// violations (or the harness failed), 2 usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	setMainPrefix(args)
	fs := flag.NewFlagSet("baton sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, below
	seed := fs.Int64("seed", -1, "replay this one seed (its report; --events: every event)")
	seeds := fs.Int("seeds", 0, "seeds to run (0: until --for has passed)")
	first := fs.Int64("first", 1, "first seed")
	forD := fs.Duration("for", 0, "wall-clock bound of the search: no seed starts after it (default 1m with --seeds 0; a sweep: --for 2h)")
	dur := fs.Duration("time", 0, "virtual duration of each seed's fault phase (0: 8s, or the profile's)")
	profile := fs.String("profile", "", "fault mix and load: "+strings.Join(ProfileNames(), ", ")+" (default: from the seed)")
	nodes := fs.Int("nodes", 0, "devices, 3 to 5 (default: from the seed)")
	ttl := fs.Duration("ttl", 0, "lease TTL (default 1s)")
	tick := fs.Duration("tick", 0, "signer tick (default 100ms)")
	knobs := fs.String("knobs", "", knobNames())
	format := fs.String("format", "", "the chain's commit format: baton (default) or atproto (a P-256 chain key; docs/DRILLS.md)")
	parallel := fs.Int("parallel", 0, "seeds at once (default GOMAXPROCS)")
	out := fs.String("out", "sim-report", "directory for failed seeds' reports and events")
	progress := fs.Duration("progress", 10*time.Second, "interval of the progress line (stderr)")
	events := fs.Bool("events", false, "with --seed: print every event as it happens")
	keep := fs.Bool("keep", false, "keep the data directories")
	logFile := fs.String("log", "", "with --seed: write the nodes' logs (debug level, Raft's included) to this file")
	repeat := fs.Int("repeat", 1, "with --seed: replay it this many times and count how often each violation comes back")
	procs := fs.Int("procs", 0, "GOMAXPROCS of a replay (default 1: replays repeat best with one)")
	worker := fs.Bool("worker", false, "internal: run the seeds read from stdin, one JSON result per line on stdout")
	_ = fs.MarkHidden("worker") // how a search runs its worker processes
	fs.Usage = func() {
		fs.SetOutput(stdout)
		defer fs.SetOutput(io.Discard)
		fmt.Fprintf(stdout, "Usage: baton sim [--seeds N | --for D] [flags]   search seeds\n"+
			"       baton sim --seed N [flags]             replay one seed\n\n"+
			"Runs real nodes (node.New over a simulated network and Raft transport) in virtual time\n"+
			"under seeded fault schedules and checks the chain, lease and intent invariants\n"+
			"(docs/DRILLS.md, \"Simulation\"). Exit status 1 when a seed found a violation.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // pflag printed the usage already
			return 0
		}
		fmt.Fprintf(stderr, "baton sim: %v (see baton sim --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton sim: unexpected argument %q (see baton sim --help)\n", fs.Arg(0))
		return 2
	}
	k, err := ParseKnobs(*knobs)
	if err != nil {
		fmt.Fprintf(stderr, "baton sim: %v\n", err)
		return 2
	}
	if *profile != "" {
		if _, err := LookupProfile(*profile); err != nil {
			fmt.Fprintf(stderr, "baton sim: %v\n", err)
			return 2
		}
	}
	if err := checkFormat(*format); err != nil {
		fmt.Fprintf(stderr, "baton sim: %v\n", err)
		return 2
	}
	base := Config{Devices: *nodes, Duration: *dur, Profile: *profile, TTL: *ttl, Tick: *tick, Knobs: k, Keep: *keep, Format: *format}
	if *seed >= 0 || *worker {
		// One seed at a time per process, on one P, with Raft's random source seeded:
		// the closest a run gets to deterministic (see Config.SeedGlobalRand).
		runtime.GOMAXPROCS(cmp.Or(*procs, 1))
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(gcPercent) // as the package's tests: the same runs
		}
		if err := seedableGlobalRand(); err != nil {
			fmt.Fprintf(stderr, "baton sim: %v\n", err)
			return 1
		}
		base.SeedGlobalRand = true
	}
	if *seed >= 0 && *repeat > 1 {
		base.Seed = *seed
		var report string
		if err := withT(func(t *testing.T) { report = Reproduce(t, base, *repeat) }); err != nil {
			fmt.Fprintf(stderr, "baton sim: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, report)
		return 0
	}
	if *logFile != "" {
		if *seed < 0 {
			fmt.Fprintf(stderr, "baton sim: --log needs --seed\n")
			return 2
		}
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintf(stderr, "baton sim: %v\n", err)
			return 1
		}
		defer f.Close()
		base.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if *seed >= 0 {
		return replayMain(base, *seed, *events, stdout, stderr)
	}
	if *seeds == 0 && *forD == 0 {
		*forD = time.Minute // a first look; sweeps say how long (docs/DRILLS.md)
	}
	if *worker {
		return workerMain(base, *out, os.Stdin, stdout, stderr)
	}
	o := SearchOptions{Base: base, First: *first, Seeds: *seeds, For: *forD, Parallel: *parallel, Out: *out,
		Progress: *progress, Log: stderr}
	fmt.Fprintf(stderr, "sim: searching from seed %d (%s) in %d worker processes; failed seeds' reports go to %s\n",
		*first, searchBound(o), cmp.Or(o.Parallel, defaultParallel()), *out)
	sum := searchInWorkers(ctx, o)
	fmt.Fprint(stdout, sum.String())
	if sum.Failed > 0 {
		return 1
	}
	return 0
}

func searchBound(o SearchOptions) string {
	switch {
	case o.Seeds > 0 && o.For > 0:
		return fmt.Sprintf("%d seeds or %v", o.Seeds, o.For)
	case o.Seeds > 0:
		return fmt.Sprintf("%d seeds", o.Seeds)
	}
	return fmt.Sprintf("for %v", o.For)
}

func replayMain(base Config, seed int64, events bool, stdout, stderr io.Writer) int {
	cfg := base
	cfg.Seed = seed
	if events {
		cfg.Trace = func(e Event) { fmt.Fprintln(stderr, e) }
	}
	var res *Result
	err := withT(func(t *testing.T) { res = Run(t, cfg) })
	if err != nil {
		fmt.Fprintf(stderr, "baton sim: %v\n", err)
		return 1
	}
	if res == nil {
		fmt.Fprintln(stderr, "baton sim: the run did not complete")
		return 1
	}
	fmt.Fprintln(stdout, res.Summary())
	if !res.OK() {
		fmt.Fprint(stdout, res.Report())
		return 1
	}
	return 0
}
