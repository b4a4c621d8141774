package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/device"
)

// Issue 38 item 5: the safe path. `baton backup` copies a running device's keys,
// members and chain (never its identity, Raft log or state); `baton restore` makes a
// new device of it, whose first join removes the old identity from the cluster
// (three devices: two keep the quorum while the third is lost).
func TestBackupAndRestoreAsANewMember(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three nodes")
	}
	first := mustInit(t)
	_, _, stop1, _ := runInProcessWait(t, append([]string{"run", "--data", first, "--listen", freeListen(t)}, opsFlags...)...)
	defer stop1()
	testutil.WaitFor(t, 30*time.Second, "b1 holds", func() bool {
		st, err := stateOf(first)
		return err == nil && st.Lease.HeldByMe
	})
	second := filepath.Join(t.TempDir(), "b2")
	_, _, stop2, _ := runInProcessWait(t, append([]string{"join", "--data", second, "--invite-file", inviteFile(t, first), "--listen", freeListen(t)}, opsFlags...)...)
	testutil.WaitFor(t, 30*time.Second, "b2 joined", func() bool {
		st, err := stateOf(second)
		return err == nil && st.Members == 2 && st.Raft.Leader != ""
	})
	third := filepath.Join(t.TempDir(), "b3")
	_, _, stop4, _ := runInProcessWait(t, append([]string{"join", "--data", third, "--invite-file", inviteFile(t, first), "--listen", freeListen(t)}, opsFlags...)...)
	defer stop4()
	testutil.WaitFor(t, 30*time.Second, "b3 joined", func() bool {
		st, err := stateOf(third)
		return err == nil && st.Members == 3 && st.Raft.Leader != ""
	})
	if code, _, errs := runCLI(t, nil, "", "submit", "--data", first, "--path", "posts/a", "--value", "YQ==", "--wait", "signed"); code != 0 {
		t.Fatalf("submit: %d %s", code, errs)
	}
	old, err := stateOf(second)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "b2 applied seq 1", func() bool {
		st, err := stateOf(second)
		return err == nil && st.Head.Seq >= 1
	})

	backup := filepath.Join(t.TempDir(), "backup")
	code, out, errs := runCLI(t, nil, "", "backup", "--data", second, "--out", backup)
	if code != 0 || !strings.Contains(out, "up to seq 1") {
		t.Fatalf("backup: %d %q %q", code, out, errs)
	}
	for _, f := range []string{device.NetworkKeyFile, device.ChainKeyFile, BackupFile, BackupChainFile} {
		if _, err := os.Stat(filepath.Join(backup, f)); err != nil {
			t.Errorf("the backup lacks %s: %v", f, err)
		}
	}
	for _, f := range []string{device.IdentityFile, "raft.db", "state.db"} {
		if _, err := os.Stat(filepath.Join(backup, f)); err == nil {
			t.Errorf("the backup holds %s: it could run as the old device", f)
		}
	}
	if lines := countLines(t, filepath.Join(backup, BackupChainFile)); lines != 1 {
		t.Errorf("the backup's chain has %d commits, want 1", lines)
	}
	if code, _, errs := runCLI(t, nil, "", "backup", "--data", second, "--out", backup); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("a backup over an existing dir: %d %q", code, errs)
	}

	// b2's device is lost; it comes back from the backup as a new member (b1 and b3
	// keep the quorum).
	if code := stop2(); code != 0 {
		t.Fatalf("stop b2: exit %d", code)
	}
	restored := filepath.Join(t.TempDir(), "b2-restored")
	code, out, errs = runCLI(t, nil, "", "restore", "--from", backup, "--data", restored)
	if code != 0 || !strings.Contains(out, "baton join --data "+restored) {
		t.Fatalf("restore: %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, nil, "", "restore", "--from", backup, "--data", second); code == 0 || !strings.Contains(errs, "already a device's data dir") {
		t.Errorf("restore into a data dir: %d %q", code, errs)
	}
	_, _, stop3, _ := runInProcessWait(t, append([]string{"join", "--data", restored, "--invite-file", inviteFile(t, first), "--listen", freeListen(t)}, opsFlags...)...)
	defer stop3()
	defer func() {
		if t.Failed() {
			st, err := stateOf(first)
			rs, rerr := stateOf(restored)
			t.Logf("b1: members %d err %v; restored: members %d head %d rejoin %+v problem %q err %v", st.Members, err, rs.Members, rs.Head.Seq, rs.Rejoin, rs.Problem, rerr)
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "the restored device a member and the old one removed", func() bool {
		st, err := stateOf(first)
		if err != nil || st.Members != 3 {
			return false
		}
		rs, err := stateOf(restored)
		_, serr := os.Stat(filepath.Join(restored, "replaces.json")) // gone once the removal is done
		return err == nil && rs.ID != old.ID && rs.Members == 3 && rs.Head.Seq >= 1 && serr != nil
	})
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}
