package testnet

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/device"
)

func runProcsTest(t *testing.T, scenario string) Report {
	t.Helper()
	rep := runProcs(t, scenario)
	if len(rep.Check.Failovers) == 0 {
		t.Fatalf("procs %s: no failover", scenario)
	}
	return rep
}

func runProcs(t *testing.T, scenario string) Report {
	t.Helper()
	rep, _ := runProcsFormat(t, scenario, "")
	return rep
}

// runProcsFormat runs scenario on processes of a chain of format and returns the
// report and the directory of the data dirs.
func runProcsFormat(t *testing.T, scenario, format string) (Report, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	bin := testutil.BatonBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var progress syncBuf
	dir := t.TempDir()
	ic := inspectFor(format)
	rep, err := RunScenario(ctx, DrillConfig{Procs: true, Bin: bin, Scenario: scenario, Nodes: 3,
		TTL: time.Second, Tick: 100 * time.Millisecond, Rounds: 1, Seed: 1, Dir: dir, Progress: &progress, Format: format,
		Inspect: ic.inspect})
	if err != nil {
		t.Fatal(err)
	}
	defer ic.check(t, rep)
	// An invite carries the chain key: no file of one outlives its join.
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".invite") {
			t.Errorf("invite file left behind: %s", p)
		}
		return nil
	})
	if testing.Verbose() || !rep.OK {
		t.Logf("progress:\n%s", progress.String())
	}
	c := rep.Check
	if rep.Error != "" || !rep.OK || c.Forks+c.Lost+c.Dupes+c.Invalid != 0 {
		t.Fatalf("procs %s: error %q findings %v", scenario, rep.Error, c.Findings)
	}
	if c.Acked == 0 || len(c.Heads) != 3 || !rep.Params.Procs {
		t.Fatalf("procs %s: acked %d heads %v", scenario, c.Acked, c.Heads)
	}
	return rep, dir
}

// TestProcsAtprotoKillHolder runs the kill-holder drill on `baton run` processes of
// an atproto chain (`baton init --new-chain --format atproto`: a P-256 key): every
// device's chain read over its API verifies through the format (revs, prevData, MST
// roots replayed), the repository head each device serves (getLatestCommit) is its
// chain's, and the signature audit reads the atproto commits in every Raft log.
// Before, `--format atproto --procs` was refused.
func TestProcsAtprotoKillHolder(t *testing.T) {
	rep, dir := runProcsFormat(t, "kill-holder", "atproto")
	if len(rep.Check.Failovers) == 0 || rep.Params.Format != "atproto" || rep.Check.Commits < 2 {
		t.Fatalf("failovers %d, format %q, %d commits", len(rep.Check.Failovers), rep.Params.Format, rep.Check.Commits)
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "*", device.ChainKeyFile))
	for _, p := range keys {
		k, err := chain.LoadAnyKey(p)
		if err != nil || !strings.HasPrefix(k.DID(), "did:key:zDn") { // a P-256 did:key
			t.Fatalf("%s: not a P-256 chain key (%v)", p, err)
		}
	}
	if len(keys) != 3 {
		t.Fatalf("chain keys %v, want one per device", keys)
	}
	hasEvent(t, rep, EventKill)
}

func TestProcsKillHolder(t *testing.T) {
	rep := runProcsTest(t, "kill-holder")
	hasEvent(t, rep, EventKill)
	hasEvent(t, rep, EventRestart)
}

// TestProcsPauseHolder runs SIGSTOP/SIGCONT on the holder's process (also the Raft
// leader). Unlike the in-process pause, the stopped process keeps its TCP connections
// open and never answers: proposals forwarded to it must be abandoned once the
// survivors elect a new leader (transport's TestFrozenLeaderLiveMembersKeepCommitting
// is the fast version of this).
func TestProcsPauseHolder(t *testing.T) {
	rep := runProcsTest(t, "pause-holder")
	hasEvent(t, rep, EventPause)
}

// TestProcsChurn: baton leave, then the slot joins again with its data dir wiped the
// way an operator re-adds a device (a left device's removed.json refused the join,
// and the soak's churn rounds failed).
func TestProcsChurn(t *testing.T) {
	rep := runProcs(t, "churn")
	hasEvent(t, rep, EventLeave)
	hasEvent(t, rep, EventJoin)
}

func TestProcsUnsupportedScenario(t *testing.T) {
	_, err := RunScenario(context.Background(), DrillConfig{Procs: true, Bin: "/nonexistent", Scenario: "skew"})
	if err == nil {
		t.Fatal("skew accepted in procs mode")
	}
	_, err = RunScenario(context.Background(), DrillConfig{Procs: true, Bin: "/nonexistent", Scenario: "kill-holder"})
	if err == nil {
		t.Fatal("missing binary accepted")
	}
}

// A process that exited by itself (a node stops after `baton leave`) and was reaped,
// while the goroutine that closes its exit channel has not run yet: terminate's
// SIGTERM finds it finished. That is a stopped process, not a failed round (the
// 35-minute soak at ab79c2a failed two churn rounds with "os: process already
// finished").
func TestProcTerminateAfterItExitedByItself(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("no true(1): %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p := &proc{cmd: cmd, exited: exited}
	if err := p.signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal to a reaped process: %v, want os.ErrProcessDone (the race this test is about)", err)
	}
	reaper := time.AfterFunc(20*time.Millisecond, func() { close(exited) }) // the Wait goroutine, late
	defer reaper.Stop()
	if err := p.terminate(time.Second); err != nil {
		t.Fatalf("terminate of a process that exited by itself: %v", err)
	}
	if p.alive() {
		t.Fatal("still alive after terminate")
	}
}
