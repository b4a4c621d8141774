package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// harnessEnv makes the test binary run Main with the variable's value as arguments
// (TestMain): `baton sim` in a fresh process, harness and all.
const harnessEnv = "BATON_SIM_MAIN"

func runMainChild(t *testing.T, args string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), harnessEnv+"="+args)
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errs.String()
}

// TestMainStartHarness runs Main, testing.MainStart harness included (the part of
// `baton sim` outside the Go 1 compatibility promise), in a child process: a short
// search, a replay and the help.
func TestMainStartHarness(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("runs child processes")
	}
	out := t.TempDir()
	code, stdout, stderr := runMainChild(t, "--seeds 2 --time 2s --progress 0 --out "+out)
	if code > 1 || !strings.Contains(stdout, "2 seeds in") || !strings.Contains(stdout, "faults injected") {
		t.Fatalf("search: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "PASS") {
		t.Errorf("the harness's PASS line leaked:\n%s", stdout)
	}
	if code == 1 {
		files, _ := filepath.Glob(filepath.Join(out, "seed-*.txt"))
		if len(files) == 0 || !strings.Contains(stdout, "violations:") {
			t.Errorf("exit 1 without a violation report (files %v):\n%s", files, stdout)
		}
	}
	code, stdout, stderr = runMainChild(t, "--seed 3 --time 2s")
	if code > 1 || !strings.Contains(stdout, "seed 3 (") {
		t.Fatalf("replay: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runMainChild(t, "--help")
	if code != 0 || !strings.Contains(stdout, "Usage: baton sim") {
		t.Fatalf("help: exit %d\n%s", code, stdout)
	}
	if code, _, stderr = runMainChild(t, "--knobs bogus"); code != 2 || !strings.Contains(stderr, "unknown knob") {
		t.Fatalf("bad knob: exit %d\n%s", code, stderr)
	}
}

// TestSearchInProcess: Search runs seeds as subtests of one test, in this process.
func TestSearchInProcess(t *testing.T) {
	sum := Search(t, SearchOptions{Base: Config{Profile: "calm", Duration: 2 * time.Second}, First: 7, Seeds: 2, Parallel: 2})
	if sum.Seeds != 2 || sum.Virtual < 4*time.Second {
		t.Fatalf("ran %d seeds, %v virtual:\n%s", sum.Seeds, sum.Virtual, sum)
	}
	t.Log(sum)
}

// TestWorkerSaysWhyARunDidNotComplete: a seed whose run the testing package failed
// (in CI's -race run of 2026-12-03, for a data race it counted) comes back from its
// worker with why, from the worker's stderr, and a config Run cannot set up says so.
// Before, the report said only "the run did not complete": the parent dropped the
// stderr of a worker that lived on.
func TestWorkerSaysWhyARunDidNotComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	t.Setenv(failRunsEnv, "1")
	sum := searchInWorkers(context.Background(), SearchOptions{Base: Config{}, First: 1, Seeds: 3, Parallel: 1})
	for seed := int64(1); seed <= 3; seed++ {
		res := sum.Results[seed]
		if res == nil || len(res.Violations) != 1 {
			t.Fatalf("seed %d: want one violation, got %+v", seed, res)
		}
		d := res.Violations[0].Detail
		want := fmt.Sprintf("DATA RACE (a stand-in, seed %d)", seed)
		if !strings.Contains(d, errNotComplete.Error()) || !strings.Contains(d, want) {
			t.Errorf("seed %d: the report does not say why the run did not complete:\n%s", seed, d)
		}
		if strings.Count(d, "DATA RACE") != 1 {
			t.Errorf("seed %d: the report carries another seed's stderr:\n%s", seed, d)
		}
	}
	os.Unsetenv(failRunsEnv)
	sum = searchInWorkers(context.Background(), SearchOptions{Base: Config{Devices: 7}, First: 1, Seeds: 1, Parallel: 1})
	if res := sum.Results[1]; res == nil || len(res.Violations) != 1 || !strings.Contains(res.Violations[0].Detail, "could not be set up: sim: 7 devices, want 3 to 5") {
		t.Errorf("a config Run cannot set up: %+v", res)
	}
}
