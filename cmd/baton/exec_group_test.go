//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// gone reports whether pid no longer runs (no such process, or a zombie waiting for
// a reaper that may not reap in a container).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, 20*time.Second, "the command to write its background pid", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// exec runs CMD in its own process group and stops the whole group: a background
// child of CMD stops with it when the hold ends, and when CMD ends by itself and
// leaves one behind (on a9e37ae, `exec -- sh -c 'sleep 300 & sleep 300'` stopped sh
// and left the background sleep running on the old holder).
func TestExecStopsTheCommandsProcessGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node")
	}
	data := mustInit(t)
	runInProcess(t, append([]string{"run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0"}, opsFlags...)...)
	testutil.WaitFor(t, 30*time.Second, "the node to hold the lease", func() bool {
		st, err := stateOf(data)
		return err == nil && st.Lease.HeldByMe
	})
	dir := t.TempDir()

	// 1. The hold ends (release) while CMD and its background child run.
	pidFile := filepath.Join(dir, "bg1")
	var eout, eerr syncBuffer
	done := make(chan int, 1)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &eout, stderr: &eerr, getenv: func(string) string { return "" }}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done <- c.main(ctx, []string{"exec", "--data", data, "--grace", "2s", "--",
			"sh", "-c", `sleep 300 & echo $! > ` + pidFile + `; sleep 300`})
	}()
	bg := readPid(t, pidFile)
	if code, _, errs := runCLI(t, nil, "", "lease", "release", "--data", data); code != 0 {
		t.Fatalf("release: %d %s", code, errs)
	}
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(eerr.String(), "the lease hold ended") {
			t.Errorf("exec: %d %q", code, eerr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not stop when the hold ended")
	}
	if !gone(bg) {
		_ = syscall.Kill(bg, syscall.SIGKILL)
		t.Fatalf("the command's background child %d still runs after exec stopped the command", bg)
	}

	// 2. CMD ends by itself and leaves a background child in its group.
	testutil.WaitFor(t, 30*time.Second, "the node to hold the lease again", func() bool {
		st, err := stateOf(data)
		return err == nil && st.Lease.HeldByMe
	})
	pidFile = filepath.Join(dir, "bg2")
	releases := func() int {
		code, out, errs := runCLI(t, nil, "", "lease", "history", "--data", data, "--event", "release", "--json")
		if code != 0 {
			t.Fatalf("lease history: %d %q", code, errs)
		}
		return strings.Count(out, `"release"`)
	}
	before := releases()
	code, _, errs := runCLI(t, nil, "", "exec", "--data", data, "--grace", "2s", "--",
		"sh", "-c", `sleep 300 & echo $! > `+pidFile+`; exit 7`)
	if code != 7 {
		t.Errorf("exec of a command that exits 7: %d %q", code, errs)
	}
	// And released the lease (the default, as consul lock and etcdctl lock do).
	if after := releases(); after != before+1 {
		t.Errorf("%d releases in the lease history after exec's command ended, want %d", after, before+1)
	}
	bg = readPid(t, pidFile)
	if !gone(bg) {
		_ = syscall.Kill(bg, syscall.SIGKILL)
		t.Fatalf("exec returned and left the command's background child %d running", bg)
	}
}
