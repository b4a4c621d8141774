package testnet

import (
	"context"
	"errors"
	"fmt"
	flag "github.com/spf13/pflag"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

const drillUsage = `Usage: baton drill [flags]

Runs failover drills: a cluster of devices (in this process, or real baton
processes with --procs) under continuous load while faults are injected; then
checks every device's chain (no fork, valid signatures and links, every
acknowledged intent signed exactly once) and every device's Raft log (no two
commits signed for one seq and epoch; in a fault-free drill, every signed commit
applied), and writes report.json and report.html into --out. Exits 0 only if the
checker found no problem.

--duration D runs a soak instead: every fault kind at random (seeded by --seed),
one at a time, until D has passed.

Scenarios: %s, all (%s)

Flags:
`

const drillExamples = `
Examples:
  baton drill --scenario kill-holder
  baton drill --scenario all --rounds 2 --out /tmp/drill
  baton drill --scenario pause-holder --nodes 5 --ttl 2s --tick 200ms --seed 42
  baton drill --scenario load --rate 200
  baton drill --duration 10m --seed 7
  baton drill --procs --bin ./baton --duration 1h --seed 7
`

// DrillMain is ` + "`baton drill`" + `: it parses args with its own FlagSet, runs the chosen
// scenario(s), prints progress (a line per fault and event in a small drill, a status
// line every few seconds in a long one) and a summary, writes report.json and
// report.html into --out, and returns the exit code: 0 only if every scenario ran
// and the checker found no problem, 1 otherwise, 2 on a usage error.
func DrillMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, below
	scenario := fs.String("scenario", "all", "scenario name, a comma-separated list, or all")
	nodes := fs.Int("nodes", DefaultNodes, "devices (1-7)")
	ttl := fs.Duration("ttl", DefaultTTL, "lease TTL")
	tick := fs.Duration("tick", DefaultTick, "signer loop tick")
	rounds := fs.Int("rounds", 1, "rounds of the fault per scenario")
	duration := fs.Duration("duration", 0, "soak: inject random faults until this much time has passed (then drain and check)")
	seed := fs.Int64("seed", 1, "seed of the drill's random choices")
	out := fs.String("out", "drill-report", "directory for report.json and report.html")
	dataDir := fs.String("dir", "", "keep the devices' data dirs (and process logs) under `DIR`/<scenario> (default: a temp dir, removed)")
	rate := fs.Int("rate", 40, "load: intents per second (the load scenario: per device)")
	procs := fs.Bool("procs", false, "run each device as a real `baton run` process")
	bin := fs.String("bin", "", "baton binary for --procs (default: this executable)")
	verbose := fs.Bool("verbose", false, "node logs to stderr")
	strict := fs.Bool("strict", false, "known issues (testnet.KnownIssues) fail the drill too")
	format := fs.String("format", "", "the chain's commit format: baton (default) or atproto (a P-256 chain key, DAG-CBOR records; with --procs too)")
	fs.Usage = func() {
		fmt.Fprintf(stdout, drillUsage, strings.Join(ScenarioNames(), ", "), strings.Join(AllScenarios(false), ", "))
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		fmt.Fprint(stdout, drillExamples)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // pflag printed the usage already
			return 0
		}
		fmt.Fprintf(stderr, "baton drill: %v (see baton drill --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton drill: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var names []string
	switch {
	case *scenario == "all" && *duration > 0:
		names = []string{SoakScenario}
	case *scenario == "all":
		names = AllScenarios(*procs)
		for _, s := range Scenarios {
			if s.Pending != "" && (!*procs || s.Procs) {
				fmt.Fprintf(stdout, "(all skips %s: %s; run it with --scenario %s)\n", s.Name, s.Pending, s.Name)
			}
		}
	default:
		for _, n := range strings.Split(*scenario, ",") {
			sc, err := LookupScenario(n)
			if err != nil {
				fmt.Fprintf(stderr, "baton drill: %v\n", err)
				return 2
			}
			if *procs && !sc.Procs {
				fmt.Fprintf(stderr, "baton drill: %s needs in-process hooks; with --procs: %s\n", n, strings.Join(AllScenarios(true), ", "))
				return 2
			}
			names = append(names, n)
		}
	}
	switch {
	case *nodes < 1 || *nodes > MaxNodes:
		fmt.Fprintf(stderr, "baton drill: --nodes %d: want 1-%d\n", *nodes, MaxNodes)
		return 2
	case *ttl <= 0 || *tick <= 0 || *tick >= *ttl:
		fmt.Fprintf(stderr, "baton drill: need 0 < --tick < --ttl (tick %s, ttl %s)\n", *tick, *ttl)
		return 2
	case *rounds < 1 || *rounds > MaxRounds:
		fmt.Fprintf(stderr, "baton drill: --rounds %d: want 1-%d\n", *rounds, MaxRounds)
		return 2
	case *duration < 0 || *duration > 7*24*time.Hour:
		fmt.Fprintf(stderr, "baton drill: --duration %s: want 0 (off) up to a week\n", *duration)
		return 2
	case *rate < 1 || *rate > 5000:
		fmt.Fprintf(stderr, "baton drill: --rate %d: want 1-5000\n", *rate)
		return 2
	case *format != "" && *format != "baton" && *format != "atproto":
		fmt.Fprintf(stderr, "baton drill: --format %q: want baton or atproto\n", *format)
		return 2
	case *out == "":
		fmt.Fprintln(stderr, "baton drill: --out must name a directory")
		return 2
	}
	if *nodes < 3 {
		fmt.Fprintf(stderr, "baton drill: warning: with %d device(s) no takeover is possible (a quorum needs the holder)\n", *nodes)
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	suite := &Suite{Command: "baton drill " + strings.Join(args, " "), Started: time.Now()}
	for _, name := range names {
		if ctx.Err() != nil {
			break
		}
		how := fmt.Sprintf("%d round(s)", *rounds)
		if *duration > 0 {
			how = "for " + duration.String()
		}
		mode := "in-process"
		if *procs {
			mode = "processes"
		}
		if *format == "atproto" {
			mode += ", atproto chain"
		}
		fmt.Fprintf(stdout, "== %s (%d devices, %s, ttl %s, tick %s, %s, seed %d)\n", name, *nodes, mode, *ttl, *tick, how, *seed)
		dir := ""
		if *dataDir != "" {
			dir = filepath.Join(*dataDir, name)
		}
		cfg := DrillConfig{Scenario: name, Dir: dir, Nodes: *nodes, TTL: *ttl, Tick: *tick, Rounds: *rounds, Duration: *duration, Seed: *seed,
			LoadRate: *rate, Procs: *procs, Bin: *bin, Progress: stdout, Logger: logger, Strict: *strict, Format: *format}
		rep, err := RunScenario(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "baton drill: %s: %v\n", name, err)
			if errors.Is(err, ErrProcsUnavailable) || errors.Is(err, ErrBadConfig) {
				return 2
			}
			rep = Report{Scenario: name, Seed: *seed, Started: time.Now(), Finished: time.Now(), Error: err.Error()}
			rep.Finish()
		}
		suite.Reports = append(suite.Reports, rep)
	}
	if err := suite.WriteFiles(*out); err != nil {
		fmt.Fprintf(stderr, "baton drill: %v\n", err)
		return 1
	}
	writeSummary(stdout, suite)
	fmt.Fprintf(stdout, "report: %s/report.json, %s/report.html\n", *out, *out)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "baton drill: interrupted")
		return 1
	}
	if !suite.OK {
		return 1
	}
	return 0
}

func writeSummary(w io.Writer, s *Suite) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSCENARIO\tVERDICT\tCOMMITS\tACKED\tFORKS\tLOST\tDUPES\tINVALID\tEQUIV\tREFUSED\tFAILOVERS")
	for i := range s.Reports {
		r := &s.Reports[i]
		v := "PASS"
		if !r.OK {
			v = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Scenario, v, r.Check.Commits, r.Check.Acked, r.Check.Forks,
			r.Check.Lost, r.Check.Dupes, r.Check.Invalid, r.Check.Equivocations, r.Check.Refused, failoversText(r, 4))
	}
	tw.Flush()
	sum := suiteSummary(s)
	if len(s.Reports) == 1 {
		sum = s.Reports[0].Summary
	}
	writeKinds(w, sum, roundText)
	verdict := "PASS: no fork, no lost or duplicated intent, every chain valid, no equivocation"
	// Known findings by kind, counted in full (the findings list stops at maxListed
	// equivocations).
	known := map[string]int{}
	for _, r := range s.Reports {
		seen := map[string]bool{}
		for _, f := range r.Check.Findings {
			if f.Known == "" || seen[f.Kind] {
				continue
			}
			seen[f.Kind] = true
			n := 0
			for _, g := range r.Check.Findings {
				if g.Kind == f.Kind {
					n++
				}
			}
			if f.Kind == FindingEquivocation {
				n = r.Check.Equivocations
			}
			known[f.Kind+" ("+f.Known+")"] += n
		}
	}
	if len(known) > 0 {
		var ks []string
		for _, k := range sortedKeys(known) {
			ks = append(ks, fmt.Sprintf("%d %s", known[k], k))
		}
		verdict = "PASS: no fork, no lost or duplicated intent, every chain valid; known issues found: " + strings.Join(ks, ", ") + " (--strict fails on them)"
	}
	if !s.OK {
		verdict = "FAIL"
		for _, r := range s.Reports {
			if r.Error != "" {
				verdict += fmt.Sprintf("; %s: %s", r.Scenario, r.Error)
			}
			kinds := map[string]int{}
			for _, f := range r.Check.Findings {
				if f.Known == "" {
					kinds[f.Kind]++
				}
			}
			for _, k := range sortedKeys(kinds) {
				verdict += fmt.Sprintf("; %s: %d %s", r.Scenario, kinds[k], k)
			}
		}
	}
	fmt.Fprintln(w, verdict)
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
