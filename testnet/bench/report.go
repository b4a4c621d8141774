package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one run measured; Main prints it as a table and writes it as
// JSON. Durations are in milliseconds, rates per second.
type Report struct {
	Started  time.Time      `json:"started"`
	Machine  Machine        `json:"machine"`
	Settings Settings       `json:"settings"`
	Baseline []BaselineLoad `json:"baseline,omitempty"`
	// Etcd are etcd Put's load phases (--etcd-bin), EtcdVersion its version.
	Etcd        []EtcdLoad  `json:"etcd,omitempty"`
	EtcdVersion string      `json:"etcd_version,omitempty"`
	Baton       []BatonLoad `json:"baton,omitempty"`
	// BatonProcs are the load phases over three `baton run` processes (--procs).
	BatonProcs []BatonLoad `json:"baton_procs,omitempty"`
	// Stages is the latency breakdown of one signed intent at one client.
	Stages   []StageBreakdown `json:"stages,omitempty"`
	Failover *FailoverResult  `json:"failover,omitempty"`
	AtRest   *AtRestResult    `json:"at_rest,omitempty"`
	// AtRestProcs is the at-rest window over three `baton run` processes (--procs):
	// RSS and CPU per device.
	AtRestProcs *AtRestResult  `json:"at_rest_procs,omitempty"`
	Ratios      []Ratio        `json:"ratios,omitempty"`
	Errors      []string       `json:"errors,omitempty"`
	Elapsed     float64        `json:"elapsed_s"`
	Extra       map[string]any `json:"extra,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	NumCPU    int    `json:"nproc"`
	CPU       string `json:"cpu"`
	GoVersion string `json:"go"`
	OS        string `json:"os"`
}

// Settings are the run's parameters.
type Settings struct {
	Quick        bool    `json:"quick"`
	Clients      []int   `json:"clients"`
	PayloadBytes int     `json:"payload_bytes"`
	LoadWindowS  float64 `json:"load_window_s"`
	RestWindowS  float64 `json:"rest_window_s"`
	Rounds       int     `json:"rounds"`
	TTLMs        float64 `json:"ttl_ms"`
	TickMs       float64 `json:"tick_ms"`
}

// BaselineLoad is plain Raft applying commands from Clients concurrent writers.
type BaselineLoad struct {
	Clients       int     `json:"clients"`
	AppliedPerSec float64 `json:"applied_per_s"`
	Apply         Dist    `json:"apply"`
	// CPUUsPerOp is the CPU (user and system, every replica and every client: the whole
	// process) the phase used per command applied, in microseconds (0: not measured,
	// where there is no /proc).
	CPUUsPerOp float64 `json:"cpu_us_per_op,omitempty"`
}

// BatonLoad is baton taking intents from Clients concurrent clients through one API
// ("go": Node.Submit; "socket": the HTTP client over the Unix socket). The accepted
// figures come from a phase where clients wait until the intent is in the Raft log,
// the signed ones from a phase where they wait until its commit is applied locally.
type BatonLoad struct {
	API            string  `json:"api"`
	Clients        int     `json:"clients"`
	AcceptedPerSec float64 `json:"accepted_per_s"`
	SignedPerSec   float64 `json:"signed_per_s"`
	Accepted       Dist    `json:"accepted"`
	Signed         Dist    `json:"signed"`
	// Entries and Commits count the Raft entries and signed commits the signed phase
	// produced: intents per entry and per commit show the group commit at work.
	IntentsPerCommit float64 `json:"intents_per_commit,omitempty"`
	// CPUUsPerOp is the CPU the signed phase used per intent signed, in microseconds:
	// every replica and client of the phase (this process; with --procs also the three
	// device processes). 0: not measured (no /proc).
	CPUUsPerOp float64 `json:"cpu_us_per_op,omitempty"`
}

// FailoverResult is the failover drill: hard kills of the holder (separately for a
// holder that was not and that was the Raft leader), and graceful releases.
type FailoverResult struct {
	Crash       Dist     `json:"crash"`
	CrashLeader Dist     `json:"crash_leader"`
	Graceful    Dist     `json:"graceful"`
	CrashTTLx   float64  `json:"crash_median_ttl_x"`
	LeaderTTLx  float64  `json:"crash_leader_median_ttl_x"`
	CrashP99x   float64  `json:"crash_p99_ttl_x"`
	LeaderP99x  float64  `json:"crash_leader_p99_ttl_x"`
	BoundMs     float64  `json:"bound_ms"`
	OverBound   int      `json:"over_bound"`
	Notes       []string `json:"notes,omitempty"`
}

// AtRestResult is an idle cluster over a window.
type AtRestResult struct {
	WindowS            float64 `json:"window_s"`
	LeaseEntries       int     `json:"lease_entries"`
	LeaseEntriesPerTTL float64 `json:"lease_entries_per_ttl"`
	DiskBefore         int64   `json:"disk_bytes_before_snapshot"`
	DiskAfter          int64   `json:"disk_bytes_after_snapshot"`
	DiskEnd            int64   `json:"disk_bytes_end_of_window"`
	DiskAfterWindow    int64   `json:"disk_bytes_after_end_snapshot"`
	Devices            []Usage `json:"devices"`
	PerDevice          bool    `json:"per_device"`
	Note               string  `json:"note,omitempty"`
}

// Usage is one device's (or, in-process, the whole process's) resource use over the
// at-rest window.
type Usage struct {
	Name   string  `json:"name"`
	RSSMiB float64 `json:"rss_mib"`
	CPUPct float64 `json:"cpu_pct_of_core"`
}

// Ratio is one of baton's figures divided by the baseline's, with the target.
type Ratio struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
	bound  float64 // the number in Target
}

func machine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// WriteJSON writes r indented to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Print writes r as tables.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	f := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	fmt.Fprintf(w, "baton bench: %d x %s, %s; payload %d B, load window %.1fs, TTL %.0f ms, tick %.0f ms\n\n",
		r.Machine.NumCPU, r.Machine.CPU, r.Machine.GoVersion, r.Settings.PayloadBytes, r.Settings.LoadWindowS, r.Settings.TTLMs, r.Settings.TickMs)
	if len(r.Baseline) > 0 || len(r.Etcd) > 0 || len(r.Baton) > 0 || len(r.BatonProcs) > 0 {
		f("system\tapi\tclients\taccepted/s\tsigned/s\tacc p50\tacc p99\tacc max\tsig p50\tsig p99\tsig max\tintents/commit\tcpu µs/op\t\n")
		for _, b := range r.Baseline {
			f("raft baseline\ttcp\t%d\t%.0f\t-\t%.2f\t%.2f\t%.2f\t-\t-\t-\t-\t%s\t\n", b.Clients, b.AppliedPerSec, b.Apply.P50Ms, b.Apply.P99Ms, b.Apply.MaxMs, cpuText(b.CPUUsPerOp))
		}
		for _, e := range r.Etcd {
			f("etcd %s Put\t%s\t%d\t%.0f\t-\t%.2f\t%.2f\t-\t-\t-\t-\t-\t%s\t\n", r.EtcdVersion, e.Client, e.Clients, e.PerSec, e.P50Ms, e.P99Ms, cpuText(e.CPUUsPerOp))
		}
		for _, b := range append(append([]BatonLoad(nil), r.Baton...), r.BatonProcs...) {
			f("baton\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%s\t\n", b.API, b.Clients, b.AcceptedPerSec, b.SignedPerSec,
				b.Accepted.P50Ms, b.Accepted.P99Ms, b.Accepted.MaxMs, b.Signed.P50Ms, b.Signed.P99Ms, b.Signed.MaxMs, b.IntentsPerCommit, cpuText(b.CPUUsPerOp))
		}
		_ = tw.Flush()
		fmt.Fprintln(w, "(latencies in ms; baseline accepted = applied on the leader; etcd accepted = Put answered, three members in one process, grpc: a client over loopback TCP, inproc: etcd's in-process client; cpu µs/op: the CPU of every replica and client of the phase per command applied (baseline) or intent signed (baton's signed phase))")
		for _, n := range cpuNotes(r) {
			fmt.Fprintln(w, "note:", n)
		}
		fmt.Fprintln(w)
	}
	printStages(w, r.Stages)
	if fo := r.Failover; fo != nil {
		f("failover\trounds\tmin\tmedian\tp99\tmax\tmedian/TTL\tp99/TTL\t\n")
		row := func(name string, d Dist, x string) {
			f("%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", name, d.N, d.MinMs, d.P50Ms, d.P99Ms, d.MaxMs, x)
		}
		row("crash, holder not leader", fo.Crash, fmt.Sprintf("%.2f\t%.2f", fo.CrashTTLx, fo.CrashP99x))
		row("crash, holder was leader", fo.CrashLeader, fmt.Sprintf("%.2f\t%.2f", fo.LeaderTTLx, fo.LeaderP99x))
		row("graceful release", fo.Graceful, "-\t-")
		_ = tw.Flush()
		fmt.Fprintf(w, "(ms; bound TTL+tick+election = %.0f ms, %d rounds over it)\n", fo.BoundMs, fo.OverBound)
		for _, n := range fo.Notes {
			fmt.Fprintln(w, "note:", n)
		}
		fmt.Fprintln(w)
	}
	for _, a := range []*AtRestResult{r.AtRest, r.AtRestProcs} {
		if a == nil {
			continue
		}
		fmt.Fprintf(w, "at rest over %.0fs: %d Raft entries (%.2f per TTL); disk %d B before snapshot, %d B after, %d B at the end of the window, %d B after a snapshot then\n",
			a.WindowS, a.LeaseEntries, a.LeaseEntriesPerTTL, a.DiskBefore, a.DiskAfter, a.DiskEnd, a.DiskAfterWindow)
		f("device\tRSS MiB\tCPU %% of a core\t\n")
		for _, u := range a.Devices {
			f("%s\t%.1f\t%.2f\t\n", u.Name, u.RSSMiB, u.CPUPct)
		}
		_ = tw.Flush()
		if a.Note != "" {
			fmt.Fprintln(w, "note:", a.Note)
		}
		fmt.Fprintln(w)
	}
	if len(r.Ratios) > 0 {
		f("ratio to baseline\tvalue\ttarget\tmet\t\n")
		for _, x := range r.Ratios {
			v := shownValue(x)
			f("%s\t%s\t%s\t%v\t\n", x.Name, v, x.Target, x.Met)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	for _, e := range r.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	fmt.Fprintf(w, "elapsed %.1fs\n", r.Elapsed)
}

// cpuText is a cpu µs/op cell ("-": not measured).
func cpuText(us float64) string {
	if us <= 0 {
		return "-"
	}
	return strconv.FormatFloat(us, 'f', 0, 64)
}

// cpuNotes says, for each baton row with a baseline row of the same client count and
// both CPU figures, how many of this machine's cores baton would need to sign at the
// baseline's rate with the CPU it used per intent: above the machine's cores, the
// throughput target cannot be met on this machine whatever the scheduling.
func cpuNotes(r *Report) []string {
	base := map[int]BaselineLoad{}
	for _, b := range r.Baseline {
		base[b.Clients] = b
	}
	var out []string
	for _, b := range append(append([]BatonLoad(nil), r.Baton...), r.BatonProcs...) {
		bl, ok := base[b.Clients]
		if !ok || b.CPUUsPerOp <= 0 || bl.CPUUsPerOp <= 0 || b.Clients == 1 {
			continue
		}
		out = append(out, fmt.Sprintf("%s, %d clients: %.0f µs of CPU per intent signed (the baseline %.0f per command applied); signing the baseline's %.0f per second would take %.2f cores of this machine's %d",
			b.API, b.Clients, b.CPUUsPerOp, bl.CPUUsPerOp, bl.AppliedPerSec, b.CPUUsPerOp*bl.AppliedPerSec/1e6, r.Machine.NumCPU))
	}
	return out
}

// shownValue is a ratio row's value to two decimals, or whole when two decimals would
// show a value that missed its target as equal to it (1.0035 against "<= 1.0").
func shownValue(x Ratio) string {
	v := fmt.Sprintf("%.2f", x.Value)
	if r, _ := strconv.ParseFloat(v, 64); !x.Met && r == x.bound {
		return strconv.FormatFloat(x.Value, 'f', -1, 64)
	}
	return v
}
