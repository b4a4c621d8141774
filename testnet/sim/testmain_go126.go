//go:build go1.26 && !go1.27

package sim

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"testing"
	"time"
)

// withT runs f as the only test of a testing.M built with testing.MainStart, so that
// the simulator (synctest.Test needs a *testing.T) runs outside `go test`, in `baton
// sim`. testing.MainStart is meant for generated test mains and is outside the Go 1
// compatibility promise: its testDeps interface changes between releases. This file
// is built only for the release whose interface it implements (Go 1.26, checked at
// compile time by the MainStart call); other releases build testmain_other.go, and
// `baton sim` then says to use `go test ./testnet/sim` (which needs none of this).
// TestMainStartHarness runs it in a child process.
//
// It may run once per process (testing.M keeps global state). The process's
// flag.CommandLine gets the -test.* flags (testing.Init); baton uses its own flag
// sets, so nothing clashes.
func withT(f func(*testing.T)) error {
	if harnessUsed {
		return errors.New("sim: the test harness runs once per process")
	}
	harnessUsed = true
	m := testing.MainStart(testDeps{}, []testing.InternalTest{{Name: "BatonSim", F: f}}, nil, nil, nil)
	// Parse the test flags ourselves (M.Run would parse os.Args, which are baton's).
	if err := flag.CommandLine.Parse([]string{"-test.run=^BatonSim$", "-test.timeout=0", "-test.count=1"}); err != nil {
		return err
	}
	// The testing package writes on os.Stdout: a failed test's log (why a run did not
	// complete: Run's setup error, a data race counted under -race) goes to stderr,
	// M.Run's PASS or FAIL nowhere (baton sim prints its own verdict; a worker's
	// stdout is its answers).
	if r, w, err := os.Pipe(); err == nil {
		saved := os.Stdout
		os.Stdout = w
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			copyTestLog(os.Stderr, r)
		}()
		defer func() { os.Stdout = saved; w.Close(); <-copied; r.Close() }()
	}
	if code := m.Run(); code != 0 {
		return errors.New("sim: the test harness failed (see stderr)")
	}
	return nil
}

var harnessUsed bool

// copyTestLog copies the testing package's output from r to w but for the lines PASS
// and FAIL.
func copyTestLog(w io.Writer, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "PASS" && line != "FAIL" {
			fmt.Fprintln(w, line)
		}
	}
	_, _ = io.Copy(io.Discard, r) // a longer line: keep the writer from blocking
}

// testDeps is the minimal implementation of testing's testDeps for Go 1.26: tests
// run, nothing else (no profiles, no fuzzing, no coverage).
type testDeps struct{}

type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

var errUnsupported = errors.New("not supported by baton sim")

func (testDeps) ImportPath() string                          { return "github.com/batonhq/baton/testnet/sim" }
func (testDeps) ModulePath() string                          { return "github.com/batonhq/baton" }
func (testDeps) MatchString(pat, str string) (bool, error)   { return regexp.MatchString(pat, str) }
func (testDeps) SetPanicOnExit0(bool)                        {}
func (testDeps) StartCPUProfile(io.Writer) error             { return errUnsupported }
func (testDeps) StopCPUProfile()                             {}
func (testDeps) StartTestLog(io.Writer)                      {}
func (testDeps) StopTestLog() error                          { return nil }
func (testDeps) WriteProfileTo(string, io.Writer, int) error { return errUnsupported }
func (testDeps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry, []reflect.Type, string, string) error {
	return errUnsupported
}
func (testDeps) RunFuzzWorker(func(corpusEntry) error) error { return errUnsupported }
func (testDeps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) {
	return nil, errUnsupported
}
func (testDeps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (testDeps) ResetCoverage()                          {}
func (testDeps) SnapshotCoverage()                       {}
func (testDeps) InitRuntimeCoverage() (mode string, tearDown func(string, string) (string, error), snapcov func() float64) {
	return "", nil, nil
}
