package testnet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"
)

const drillUsage = `Usage: baton drill [flags]

Runs failover drills: a cluster of devices (in this process, or real baton
processes with --procs) under continuous load while faults are injected; then
checks every device's chain (no fork, valid signatures and links, every
acknowledged intent signed exactly once) and writes report.json and report.html
(a timeline picture) into --out. Exits 0 only if the checker found no problem.

Scenarios: %s, all

Flags:
`

const drillExamples = `
Examples:
  baton drill --scenario kill-holder
  baton drill --scenario all --rounds 2 --out /tmp/drill
  baton drill --scenario pause-holder --nodes 5 --ttl 2s --tick 200ms --seed 42
  baton drill --procs --bin ./baton --scenario kill-holder
`

// DrillMain is `baton drill`: it parses args with its own FlagSet, runs the chosen
// scenario(s), prints one progress line per fault and event and a summary, writes
// report.json and report.html into --out, and returns the exit code: 0 only if
// every scenario ran and the checker found no problem, 1 otherwise, 2 on a usage
// error.
func DrillMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "all", "scenario name or all")
	nodes := fs.Int("nodes", DefaultNodes, "devices (1-7)")
	ttl := fs.Duration("ttl", DefaultTTL, "lease TTL")
	tick := fs.Duration("tick", DefaultTick, "signer loop tick")
	rounds := fs.Int("rounds", 1, "rounds of the fault per scenario")
	seed := fs.Int64("seed", 1, "seed of the drill's random choices")
	out := fs.String("out", "drill-report", "directory for report.json and report.html")
	rate := fs.Int("rate", 40, "load: intents per second")
	procs := fs.Bool("procs", false, "run each device as a real `baton run` process")
	bin := fs.String("bin", "", "baton binary for --procs (default: this executable)")
	verbose := fs.Bool("verbose", false, "node logs to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), drillUsage, strings.Join(ScenarioNames(), ", "))
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), drillExamples)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton drill: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var names []string
	if *scenario == "all" {
		names = ScenarioNames()
		if *procs {
			names = ProcsScenarios
		}
	} else {
		for _, n := range strings.Split(*scenario, ",") {
			if _, err := LookupScenario(n); err != nil {
				fmt.Fprintf(stderr, "baton drill: %v\n", err)
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
	case *rounds < 1 || *rounds > 100:
		fmt.Fprintf(stderr, "baton drill: --rounds %d: want 1-100\n", *rounds)
		return 2
	case *rate < 1 || *rate > 5000:
		fmt.Fprintf(stderr, "baton drill: --rate %d: want 1-5000\n", *rate)
		return 2
	case *out == "":
		fmt.Fprintln(stderr, "baton drill: --out must name a directory")
		return 2
	}
	if *nodes < 3 {
		fmt.Fprintf(stderr, "baton drill: warning: with %d device(s) no takeover is possible (a quorum needs the holder)\n", *nodes)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	suite := &Suite{Command: "baton drill " + strings.Join(args, " "), Started: time.Now()}
	for _, name := range names {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(stdout, "== %s (%d devices, ttl %s, tick %s, %d round(s), seed %d)\n", name, *nodes, *ttl, *tick, *rounds, *seed)
		cfg := DrillConfig{Scenario: name, Nodes: *nodes, TTL: *ttl, Tick: *tick, Rounds: *rounds, Seed: *seed,
			LoadRate: *rate, Progress: stdout, Logger: logger}
		var rep Report
		var err error
		if *procs {
			rep, err = RunProcsScenario(ctx, ProcsConfig{DrillConfig: cfg, Bin: *bin})
		} else {
			rep, err = RunScenario(ctx, cfg)
		}
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
	fmt.Fprintln(tw, "\nSCENARIO\tVERDICT\tCOMMITS\tACKED\tFORKS\tLOST\tDUPES\tINVALID\tFAILOVERS")
	for _, r := range s.Reports {
		v := "PASS"
		if !r.OK {
			v = "FAIL"
		}
		var fs []string
		for _, f := range r.Check.Failovers {
			fs = append(fs, failoverText(f))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Scenario, v, r.Check.Commits, r.Check.Acked, r.Check.Forks,
			r.Check.Lost, r.Check.Dupes, r.Check.Invalid, strings.Join(fs, "; "))
	}
	tw.Flush()
	verdict := "PASS: no fork, no lost or duplicated intent, every chain valid"
	if !s.OK {
		verdict = "FAIL"
		for _, r := range s.Reports {
			if r.Error != "" {
				verdict += fmt.Sprintf("; %s: %s", r.Scenario, r.Error)
			}
			for _, f := range r.Check.Findings {
				verdict += fmt.Sprintf("; %s: %s", r.Scenario, f)
			}
		}
	}
	fmt.Fprintln(w, verdict)
}
