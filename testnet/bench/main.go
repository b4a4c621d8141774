package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/batonhq/baton/signer/node"
)

// Options are the parameters of one run; Main fills them from flags.
type Options struct {
	Quick      bool
	Clients    []int
	Payload    int
	LoadWindow time.Duration // per load phase
	RestWindow time.Duration // at-rest window
	Rounds     int           // failover rounds per kind
	TTL, Tick  time.Duration
	Dir        string // data dirs; a temporary directory when empty
	// Procs is a baton binary: also measure the at-rest window over three `baton
	// run` processes of it (per-device RSS and CPU). Empty: in-process only.
	Procs string
	// Etcd is a tools/etcdbench binary: also measure etcd Put in this run (empty:
	// none).
	Etcd     string
	Skip     map[string]bool
	Progress io.Writer // progress lines; nil = none
	// Profile is a directory for CPU profiles (empty: none): load.pprof of this
	// process over the load section, rest-dN.pprof of each process over the at-rest
	// window with --procs (the profiler's own cost is in that run's CPU figures).
	Profile string
	// StageRounds is the number of traced one-client rounds per API of the stages
	// section (the latency breakdown).
	StageRounds int
	// StageGap is a pause before each traced round (0: none, rounds back to back).
	// The followers apply a commit when the next round's entries reach them, at the
	// moment the leader waits for their answers; a gap longer than the leader's
	// nudge (a few ms) lets them apply it between rounds instead, which shows what
	// their applies cost the round on a machine whose cores the replicas share.
	StageGap time.Duration
}

// DefaultOptions are the full run's parameters.
func DefaultOptions() Options {
	return Options{
		Clients:     []int{1, 16, 64},
		Payload:     200,
		LoadWindow:  5 * time.Second,
		RestWindow:  2 * time.Minute,
		Rounds:      20,
		TTL:         2 * time.Second,
		Tick:        100 * time.Millisecond,
		StageRounds: 300,
	}
}

// QuickOptions are --quick's: the same shape in well under two minutes.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Quick = true
	o.LoadWindow = time.Second
	o.RestWindow = 5 * time.Second
	o.Rounds = 2
	o.StageRounds = 30
	return o
}

// Sections Main can skip with --skip.
const (
	SectionBaseline = "baseline"
	SectionLoad     = "load"
	SectionFailover = "failover"
	SectionRest     = "rest"
)

// Main runs `baton bench` with args (flags only) and returns the exit code: 0 after a
// run (whatever the figures), 1 when a section failed, 2 on bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, below
	quick := fs.Bool("quick", false, "short run (few rounds, short windows) for CI: under two minutes")
	out := fs.String("out", "", "write the report as JSON to `FILE`")
	window := fs.Duration("window", 0, "at-rest window (default 2m, 5s with --quick)")
	rounds := fs.Int("rounds", 0, "failover rounds per kind (default 20, 2 with --quick)")
	load := fs.Duration("load", 0, "duration of each load phase (default 5s, 1s with --quick)")
	clients := fs.String("clients", "1,16,64", "comma-separated client counts")
	payload := fs.Int("payload", 200, "intent value size in bytes")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL of the baton cluster")
	tick := fs.Duration("tick", 100*time.Millisecond, "signer tick of the baton cluster")
	dir := fs.String("dir", "", "directory for the data dirs (default: a temporary directory, removed after)")
	skip := fs.String("skip", "", "comma-separated sections to skip: baseline, etcd, stages, load, failover, rest")
	etcdBin := fs.String("etcd-bin", "", "also measure etcd Put on three embedded members in this run, with the tools/etcdbench `binary` (cd tools/etcdbench && go build -o /tmp/etcdbench .): rows and ratios beside baton's")
	stageRounds := fs.Int("stage-rounds", 0, "traced one-client rounds per API in the stages section (default 300, 30 with --quick)")
	stageGap := fs.Duration("stage-gap", 0, "pause before each traced round of the stages section (e.g. 6ms: the followers apply the last commit between rounds)")
	verbose := fs.BoolP("verbose", "v", false, "print progress to stderr")
	procs := fs.Bool("procs", false, "also measure over three `baton run` processes of this binary: unless rest is skipped, at rest (per-device RSS and CPU), and unless load is skipped, the load phases through the holder's socket")
	procsBin := fs.String("baton-bin", "", "with --procs: the baton binary to run (default: this executable)")
	profile := fs.String("profile", "", "write CPU profiles to `DIR`: load.pprof (this process, the load section) and, with --procs, rest-dN.pprof per process (adds the profiler's cost to the CPU figures)")
	fs.Usage = func() {
		fmt.Fprintf(stdout, `Usage: baton bench [flags]

Measures baton on a three-device cluster in this process (real libp2p on 127.0.0.1,
real bolt files) against three plain hashicorp/raft nodes (raft-boltdb, TCP transport,
trivial FSM) in the same run: throughput and latency at 1, 16 and 64 clients through
the Go API and the Unix-socket API, failover after a hard kill of the holder and after
a graceful release, and an idle cluster's lease writes, disk, RSS and CPU. Prints a
table with baton's figures as ratios to the baseline; --out writes JSON.

Flags:
`)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // pflag printed the usage already
			return 0
		}
		fmt.Fprintf(stderr, "baton bench: %v (see baton bench --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	o := DefaultOptions()
	if *quick {
		o = QuickOptions()
	}
	if *window > 0 {
		o.RestWindow = *window
	}
	if *rounds > 0 {
		o.Rounds = *rounds
	}
	if *load > 0 {
		o.LoadWindow = *load
	}
	if *stageRounds > 0 {
		o.StageRounds = *stageRounds
	}
	if *stageGap < 0 {
		fmt.Fprintln(stderr, "baton bench: --stage-gap must not be negative")
		return 2
	}
	o.StageGap = *stageGap
	cs, err := parseInts(*clients)
	if err != nil || *payload <= 0 || *ttl <= 0 || *tick <= 0 {
		fmt.Fprintln(stderr, "baton bench: bad --clients, --payload, --ttl or --tick")
		return 2
	}
	if *dir != "" {
		// A bench starts new clusters: data left by an earlier run would be rejoined
		// (the baseline refuses to bootstrap, baton waits for a holder that never
		// comes), so only a new or empty directory is accepted.
		ents, err := os.ReadDir(*dir)
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stderr, "baton bench: --dir: %v\n", err)
			return 2
		case len(ents) > 0:
			fmt.Fprintf(stderr, "baton bench: --dir %s is not empty (an earlier run's data?): remove it or name a new one\n", *dir)
			return 2
		}
	}
	o.Clients, o.Payload, o.TTL, o.Tick, o.Dir = cs, *payload, *ttl, *tick, *dir
	o.Skip = map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			switch s {
			case SectionBaseline, SectionEtcd, SectionStages, SectionLoad, SectionFailover, SectionRest:
				o.Skip[s] = true
			default:
				fmt.Fprintf(stderr, "baton bench: unknown section %q\n", s)
				return 2
			}
		}
	}
	if *verbose {
		o.Progress = stderr
	}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			fmt.Fprintln(stderr, "baton bench: --profile:", err)
			return 2
		}
		o.Profile = *profile
	}
	o.Etcd = *etcdBin
	if *procs {
		o.Procs = *procsBin
		if o.Procs == "" {
			exe, err := os.Executable()
			if err != nil {
				fmt.Fprintln(stderr, "baton bench: --procs:", err)
				return 2
			}
			o.Procs = exe
		}
	}
	r := Run(ctx, o)
	r.Print(stdout)
	if *out != "" {
		if err := r.WriteJSON(*out); err != nil {
			fmt.Fprintln(stderr, "baton bench:", err)
			return 1
		}
	}
	if len(r.Errors) > 0 {
		return 1
	}
	return 0
}

func parseInts(s string) ([]int, error) {
	var xs []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		xs = append(xs, n)
	}
	return xs, nil
}

// Run measures every section not skipped and returns the report; a failing section
// is recorded in Report.Errors and the others still run.
func Run(ctx context.Context, o Options) *Report {
	start := time.Now()
	r := &Report{Started: start.UTC(), Machine: machine(), Settings: Settings{
		Quick: o.Quick, Clients: o.Clients, PayloadBytes: o.Payload,
		LoadWindowS: o.LoadWindow.Seconds(), RestWindowS: o.RestWindow.Seconds(),
		Rounds: o.Rounds, TTLMs: float64(o.TTL) / 1e6, TickMs: float64(o.Tick) / 1e6,
	}}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "baton-bench-")
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			return r
		}
		defer os.RemoveAll(d)
		dir = d
	}
	fail := func(section string, err error) {
		if err != nil {
			r.Errors = append(r.Errors, section+": "+err.Error())
		}
	}
	if !o.Skip[SectionBaseline] {
		o.progress("baseline: plain raft")
		fail(SectionBaseline, runBaseline(ctx, o, dir, r))
	}
	if o.Etcd != "" && !o.Skip[SectionEtcd] {
		o.progress("etcd: three embedded members (%s)", o.Etcd)
		fail(SectionEtcd, runEtcd(ctx, o, o.Etcd, dir+"/etcd", r))
	}
	runBaton(ctx, o, dir, r, fail)
	r.Ratios = append(ratios(r), etcdRatios(r)...)
	r.Elapsed = time.Since(start).Round(100 * time.Millisecond).Seconds()
	return r
}

func (o Options) progress(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", a...)
	}
}

// runBaseline measures plain Raft at each client count.
func runBaseline(ctx context.Context, o Options, dir string, r *Report) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	b, err := StartBaseline(sctx, dir+"/baseline")
	cancel()
	if err != nil {
		return err
	}
	defer b.Close()
	cmd := make([]byte, o.Payload)
	// Warm up: connections, pools, bolt file growth.
	if _, _, err := runLoad(ctx, 16, o.LoadWindow/4, func(ctx context.Context, _, _ int) error { return b.Apply(ctx, cmd) }); err != nil {
		return err
	}
	for _, c := range o.Clients {
		cpu := startCPU()
		rate, lats, err := runLoad(ctx, c, o.LoadWindow, func(ctx context.Context, _, _ int) error { return b.Apply(ctx, cmd) })
		if err != nil {
			return fmt.Errorf("%d writers: %w", c, err)
		}
		r.Baseline = append(r.Baseline, BaselineLoad{Clients: c, AppliedPerSec: round1(rate), Apply: Summarise(lats), CPUUsPerOp: cpu.perOp(len(lats))})
		o.progress("baseline %d writers: %.0f/s p50 %.2f ms", c, rate, Summarise(lats).P50Ms)
	}
	if !o.Skip[SectionStages] {
		bd, err := traceStages(ctx, "raft", o.StageRounds, o.StageGap, o.Payload, func(ctx context.Context, _ int, _ string, _ []byte, _ node.Wait) error {
			return b.Apply(ctx, cmd)
		})
		if err != nil {
			return fmt.Errorf("stages: %w", err)
		}
		r.Stages = append(r.Stages, bd)
		o.progress("stages raft: %d rounds, p50 %.2f ms", bd.Rounds, bd.Total.P50Ms)
	}
	return nil
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
