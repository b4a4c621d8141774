package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/stages"
)

// runMain runs Main with args and --out, fails the test on a non-zero exit, and
// returns the table it printed and the report it wrote.
func runMain(t *testing.T, limit time.Duration, args ...string) (string, Report) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	code := Main(ctx, append(args, "--dir", t.TempDir(), "--out", out), &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return stdout.String(), r
}

func TestMainQuick(t *testing.T) {
	stdout, r := runMain(t, 90*time.Second, "--quick", "--load", "300ms", "--window", "2s", "--rounds", "1", "--clients", "1,4", "--ttl", "1s", "--tick", "50ms", "--stage-gap", "2ms")
	for _, want := range []string{"raft baseline", "baton|", "crash, holder was leader", "at rest over", "ratio to baseline"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if len(r.Baseline) != 2 || r.Baseline[0].AppliedPerSec <= 0 || r.Baseline[0].Apply.N == 0 {
		t.Fatalf("baseline = %+v", r.Baseline)
	}
	if len(r.Baton) != 4 { // go and socket at 1 and 4 clients
		t.Fatalf("baton rows = %+v", r.Baton)
	}
	for _, b := range r.Baton {
		if b.AcceptedPerSec <= 0 || b.SignedPerSec <= 0 || b.Signed.N == 0 {
			t.Errorf("baton row %+v", b)
		}
	}
	if fo := r.Failover; fo == nil || fo.Crash.N != 1 || fo.CrashLeader.N != 1 || fo.Graceful.N != 1 {
		t.Fatalf("failover = %+v", r.Failover)
	}
	if a := r.AtRest; a == nil || a.LeaseEntries == 0 || a.DiskAfter == 0 || len(a.Devices) == 0 {
		t.Fatalf("at rest = %+v", r.AtRest)
	}
	if len(r.Ratios) == 0 {
		t.Fatal("no ratios")
	}
	// The stages section: a breakdown for the baseline and each API, with rounds and
	// the segments of the Raft round in each.
	if len(r.Stages) != 3 {
		t.Fatalf("stages = %+v", r.Stages)
	}
	for _, b := range r.Stages {
		segs := map[string]bool{}
		for _, x := range b.Rows {
			segs[x.Segment] = true
		}
		if b.Rounds == 0 || b.Total.N == 0 || !segs["raft: leader log write and fsync"] || !segs["raft: follower log write and fsync"] {
			t.Errorf("stages %s: %+v", b.API, b)
		}
		if b.GapMs != 2 || !strings.Contains(stdout, "traced rounds (each after a 2 ms pause)") {
			t.Errorf("stages %s: gap %v ms, want --stage-gap's 2 in the JSON and the table", b.API, b.GapMs)
		}
		if b.API != "raft" && !segs["sign (CBOR, ed25519)"] {
			t.Errorf("stages %s lack the signature: %+v", b.API, b)
		}
	}
}

// TestAnalyseStages cuts a synthetic trace into its segments: two replicas besides
// the leader, the quorum follower is the first to finish its write.
func TestAnalyseStages(t *testing.T) {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	ev := func(s stages.Stage, lo uint64, who uintptr, at float64) stages.Event {
		return stages.Event{Stage: s, Lo: lo, Hi: lo, Who: who, At: ms(at)}
	}
	evs := []stages.Event{
		ev(stages.ClientSend, 0, 0, 0),
		ev(stages.SubmitStart, 0, 0, 0.1),
		ev(stages.Queued, 0, 0, 0.2),
		ev(stages.SignStart, 0, 0, 0.3),
		ev(stages.Signed, 0, 0, 0.4),
		ev(stages.RaftApply, 0, 1, 0.5),
		ev(stages.StoreStart, 7, 1, 0.6),
		ev(stages.StoreEnd, 7, 1, 1.6),
		ev(stages.StoreStart, 7, 2, 1.8),
		ev(stages.StoreStart, 7, 3, 1.9),
		ev(stages.StoreEnd, 7, 3, 2.5),
		ev(stages.StoreEnd, 7, 2, 2.9),
		ev(stages.ApplyStart, 7, 1, 3.0),
		ev(stages.Verified, 0, 1, 3.1),
		ev(stages.ApplyEnd, 7, 1, 3.3),
		ev(stages.RaftDone, 7, 1, 3.4),
		ev(stages.Answered, 7, 0, 3.5),
		ev(stages.SubmitDone, 0, 0, 3.6),
		ev(stages.ClientDone, 0, 0, 3.7),
		ev(stages.ApplyStart, 7, 2, 5.0),
		ev(stages.ApplyEnd, 7, 2, 5.5),
	}
	b := analyseStages("go", evs)
	if b.Rounds != 1 || b.Total.P50Ms != 3.7 {
		t.Fatalf("%+v", b)
	}
	want := map[string]float64{
		"sign (CBOR, ed25519)":                       0.1,
		"raft: leader log write and fsync":           1.0,
		"raft: follower log write and fsync":         0.6, // replica 3 finished first
		"leader apply: decode and verify the commit": 0.1,
		"beside: a follower's apply":                 0.5,
	}
	got := map[string]float64{}
	for _, x := range b.Rows {
		got[x.Segment] = x.P50Ms
	}
	for k, v := range want {
		if d := got[k] - v; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestMainFlags(t *testing.T) {
	var o, e bytes.Buffer
	// Help once, on stdout; a bad flag is one line on stderr.
	if c := Main(context.Background(), []string{"--help"}, &o, &e); c != 0 || strings.Count(o.String(), "Usage: baton bench") != 1 || e.Len() != 0 {
		t.Fatalf("--help: %d %q %q", c, o.String(), e.String())
	}
	o.Reset()
	if c := Main(context.Background(), []string{"--bogus"}, &o, &e); c != 2 || o.Len() != 0 || strings.Count(e.String(), "\n") != 1 {
		t.Fatalf("--bogus: %d %q %q", c, o.String(), e.String())
	}
	// A --dir that holds an earlier run's data is refused (its clusters would never
	// form: the baseline refused to bootstrap and baton waited for a holder).
	used := t.TempDir()
	if err := os.WriteFile(filepath.Join(used, "raft.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--clients", "0"}, {"--skip", "nope"}, {"extra"}, {"--bogus"}, {"--dir", used}} {
		if c := Main(context.Background(), args, &o, &e); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}

func TestSummarise(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := Summarise(ds)
	if d.N != 100 || d.MinMs != 1 || d.P50Ms != 50 || d.P99Ms != 99 || d.MaxMs != 100 {
		t.Fatalf("%+v", d)
	}
	if (Summarise(nil) != Dist{}) {
		t.Fatal("empty sample")
	}
}
