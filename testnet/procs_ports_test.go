package testnet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// A child that exits while the harness waits for it fails the wait at once, with its
// exit status and log, instead of after the start-up allowance (a9e37ae waited 34 s
// for a process that had exited on "the address is already in use").
func TestProcsDeadChildFailsTheWaitAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	bin := testutil.BatonBinary(t)
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: 2, Dir: t.TempDir(), SampleEvery: -1,
		Flags: func(i int) []string {
			if i == 1 {
				return []string{"--no-such-flag"} // d1's join exits at once (usage error)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err = pc.Start(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Start succeeded with a child that cannot start")
	}
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("Start: %v, want ErrExited naming the child's own error", err)
	}
	// d0's start (init, bootstrap, first claim) is inside this bound; the 34 s wait
	// for d1 is not.
	if took > 20*time.Second {
		t.Fatalf("Start took %s to notice the dead child", took)
	}
}

// Every device binds port 0 on its first start (the kernel hands out distinct free
// ports: no port is picked by the harness and handed on, the race of a9e37ae where
// two devices got one port), and a restart keeps the port the device logged.
func TestProcsPortsDistinctAndStableAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	bin := testutil.BatonBinary(t)
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: 3, Dir: t.TempDir(), SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := pc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ports := map[int]string{}
	for _, d := range pc.Devices() {
		p := loggedPort(d.Dir + ".log")
		if p == 0 {
			t.Fatalf("%s logged no 127.0.0.1 port", d.Name)
		}
		if o, dup := ports[p]; dup {
			t.Fatalf("%s and %s share port %d", o, d.Name, p)
		}
		ports[p] = d.Name
	}
	d := pc.Devices()[1]
	before := loggedPort(d.Dir + ".log")
	if err := pc.Kill(d); err != nil {
		t.Fatal(err)
	}
	if err := pc.Restart(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := pc.until(ctx, d, d.Name+" to rejoin", func() bool {
		st, ok := pc.stateOf(d)
		return ok && st.Raft.Leader != ""
	}); err != nil {
		t.Fatal(err)
	}
	if after := loggedPort(d.Dir + ".log"); after != before || d.proc.port != before {
		t.Fatalf("restart moved %s from port %d to %d (proc.port %d)", d.Name, before, after, d.proc.port)
	}
}
