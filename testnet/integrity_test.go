package testnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	bolt "go.etcd.io/bbolt"
)

// The integrity suite (issue 14): each case breaks one thing a disk or a neighbour can
// break — a bit flipped in each file, a truncated file, a full disk — on a real
// three-device cluster, and checks what must hold: no fork and no equivocation in any
// chain or Raft log, no wrong answer served, no panic, a clear error naming the
// file, and recovery (baton repair re-syncs a device from the others; a full disk
// clears by itself). docs/DRILLS.md lists the cases and their counts.

// integrityCluster starts three devices under a little load and returns the cluster,
// a standby (not the holder), and the marked intents signed so far.
func integrityCluster(t *testing.T) (*Cluster, *Device, []string) {
	t.Helper()
	c, err := NewCluster(Config{Nodes: 3, Dir: t.TempDir(), SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, _, err := c.WaitHolder(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var markers []string
	for i := range 5 {
		m := fmt.Sprintf("MARKER-%d-0123456789abcdef-MARKER", i)
		in := testutil.Put(fmt.Sprintf("m%d", i))
		in.Value = []byte(m)
		if _, err := h.Node().Submit(ctx, in, node.WaitSigned); err != nil {
			t.Fatal(err)
		}
		markers = append(markers, m)
	}
	if err := c.WaitConverged(ctx, 5); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Devices() {
		if d != h {
			return c, d, markers
		}
	}
	t.Fatal("no standby")
	return nil, nil, nil
}

// flipIn flips one bit in the middle of every copy of needle in the file (bbolt may
// keep stale copies in free pages) and returns how many it found.
func flipIn(t *testing.T, path, needle string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := bytes.Index(b, []byte(needle)); i >= 0; {
		b[i+len(needle)/2] ^= 0x01
		n++
		j := bytes.Index(b[i+1:], []byte(needle))
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if n == 0 {
		t.Fatalf("%q is not in %s", needle, path)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// repairAndRejoin runs baton repair's intentlog.Repair on d and restarts it: it
// re-syncs from the others and ends up healthy at the head.
func repairAndRejoin(t *testing.T, c *Cluster, d *Device) {
	t.Helper()
	if err := intentlog.Repair(d.Dir); err != nil {
		t.Fatalf("repair %s: %v", d.Name, err)
	}
	restartRepaired(t, c, d)
}

// restartRepaired restarts a repaired device and waits until it caught up.
func restartRepaired(t *testing.T, c *Cluster, d *Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Restart(ctx, d); err != nil {
		t.Fatalf("restart %s after repair: %v", d.Name, err)
	}
	waitResynced(t, c, d)
}

func waitResynced(t *testing.T, c *Cluster, d *Device) {
	t.Helper()
	want := c.MaxSeq()
	defer func() {
		if t.Failed() {
			st, ok := c.State(d)
			t.Logf("%s: answered %v healthy %v problem %q head %d (want %d) rejoin %+v raft %+v members %d", d.Name, ok, st.Healthy, st.Problem, st.Head.Seq, want, st.Rejoin, st.Raft, st.Members)
		}
	}()
	testutil.WaitFor(t, 20*time.Second, d.Name+" re-synced and healthy", func() bool {
		st, ok := c.State(d)
		return ok && st.Healthy && st.Head.Seq >= want
	})
}

// signOnIt hands the lease to d and has it sign once: a repaired device signs on
// the cluster's head, never a fork of its own.
func signOnIt(t *testing.T, c *Cluster, d *Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, _, err := c.WaitHolder(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h != d {
		if err := c.Transfer(ctx, h, d); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, d.Name+" holds", func() bool { return d.Node() != nil && d.Node().Holds() })
	if _, err := d.Node().Submit(ctx, testutil.Put("after-"+d.Name), node.WaitSigned); err != nil {
		t.Fatal(err)
	}
}

// checkClean collects every chain and Raft log and fails on any finding (acks: the
// acknowledged intents, which must all be in the chain once).
func checkClean(t *testing.T, c *Cluster, acks ...Ack) CheckResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitConverged(ctx, 1); err != nil {
		t.Fatal(err)
	}
	in, err := c.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in.Acked = acks
	res := Check(in)
	if !res.OK() || res.Equivocations != 0 || res.Forks != 0 {
		t.Fatalf("after the fault: %v", res.Findings)
	}
	return res
}

// A bit flips inside a log entry of a stopped standby's raft.db and its state.db is
// gone, so the restart would replay it (the case that once forked the chain): the
// restart is refused naming raft.db and the index; baton repair re-syncs it; handed
// the lease, it signs on the cluster's head.
func TestIntegrityFlippedRaftLogEntry(t *testing.T) {
	c, d, markers := integrityCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx, d); err != nil {
		t.Fatal(err)
	}
	flipIn(t, filepath.Join(d.Dir, intentlog.RaftFile), markers[2])
	for _, f := range []string{intentlog.StateFile, intentlog.CleanFile} {
		_ = os.Remove(filepath.Join(d.Dir, f))
	}
	err := c.Restart(ctx, d)
	if !errors.Is(err, intentlog.ErrCorrupt) || !strings.Contains(err.Error(), intentlog.RaftFile) || !strings.Contains(err.Error(), "repair") {
		t.Fatalf("restart over a flipped raft.db entry: %v", err)
	}
	repairAndRejoin(t, c, d)
	signOnIt(t, c, d)
	checkClean(t, c)
}

// A truncated raft.db: refused at start (no panic, no SIGBUS), then repaired.
func TestIntegrityTruncatedRaftLog(t *testing.T) {
	c, d, _ := integrityCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx, d); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d.Dir, intentlog.RaftFile)
	// Half of the pages in use: bbolt grows its file ahead of them, and a cut in
	// the unused tail loses nothing (the device starts, rightly).
	if err := os.Truncate(p, usedSize(t, p)/2); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, d); !errors.Is(err, intentlog.ErrCorrupt) || !strings.Contains(err.Error(), intentlog.RaftFile) {
		t.Fatalf("restart over a truncated raft.db: %v", err)
	}
	// Where half the file ends depends on where bbolt put the stable store's page.
	// If the cut took it, repair refuses (the device could vote twice in a term)
	// and names the remedy: remove the device and join it again as a new member.
	if err := intentlog.Repair(d.Dir); err != nil {
		if !strings.Contains(err.Error(), "stable store") || !strings.Contains(err.Error(), "join it again as a new member") {
			t.Fatalf("repair over a truncated raft.db: %v", err)
		}
		t.Logf("the cut took the stable store: %v", err)
		rejoinAsNew(t, c, d)
	} else {
		restartRepaired(t, c, d)
	}
	checkClean(t, c)
}

// usedSize is the size of the pages bbolt's file at path uses (its high-water mark).
func usedSize(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// rejoinAsNew is the remedy for a device whose stable store is lost: a member
// removes it, its state is wiped, and it joins through a join window.
func rejoinAsNew(t *testing.T, c *Cluster, d *Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Node().RemoveMember(ctx, d.ID()); err != nil {
		t.Fatalf("remove %s: %v", d.Name, err)
	}
	if err := c.Rejoin(ctx, d); err != nil {
		t.Fatalf("rejoin %s: %v", d.Name, err)
	}
	waitResynced(t, c, d)
}

// A truncated state.db (a torn checkpoint): set aside and rebuilt from the log at
// start, without a crash; the device answers with the chain's own values.
func TestIntegrityTruncatedStateFile(t *testing.T) {
	c, d, markers := integrityCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx, d); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d.Dir, intentlog.StateFile)
	// Three pages: the meta pages and a little more, well below what the state
	// occupies.
	if err := os.Truncate(p, 3*int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, d); err != nil {
		t.Fatalf("restart over a truncated state.db: %v", err)
	}
	testutil.WaitFor(t, 20*time.Second, "the rebuilt replica at the head", func() bool {
		st, ok := c.State(d)
		return ok && st.Healthy && st.Head.Seq >= c.MaxSeq()
	})
	for i, m := range markers {
		v, ok, err := d.Node().Record(fmt.Sprintf("app.test/m%d", i))
		if err != nil || !ok || string(v) != m {
			t.Fatalf("record m%d after the rebuild: %q %v %v", i, v, ok, err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(d.Dir, intentlog.StateFile+".*"))
	if len(matches) == 0 {
		t.Fatal("the torn state.db was not kept aside")
	}
	checkClean(t, c)
}

// A bit flips inside a stored record and inside a stored commit of a stopped
// standby's (cleanly closed) state.db: the device never serves a value the chain did
// not sign, nor a commit whose hash does not match; it says its storage is corrupt
// and is repaired.
func TestIntegrityFlippedStateValues(t *testing.T) {
	c, d, markers := integrityCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx, d); err != nil {
		t.Fatal(err)
	}
	// The marker is both the record's value and inside the commit that carried it.
	flipIn(t, filepath.Join(d.Dir, intentlog.StateFile), markers[1])
	stopFaulty := func() {
		// A device whose storage is corrupt says so when it stops, too.
		if err := c.Stop(ctx, d); err != nil && !errors.Is(err, intentlog.ErrCorrupt) {
			t.Fatal(err)
		}
	}
	if err := c.Restart(ctx, d); err != nil {
		// Refusing to start on a corrupt state file is an answer too.
		if !errors.Is(err, intentlog.ErrCorrupt) {
			t.Fatalf("restart over a flipped state.db: %v", err)
		}
		repairAndRejoin(t, c, d)
		checkClean(t, c)
		return
	}
	n := d.Node()
	v, ok, err := n.Record("app.test/m1")
	switch {
	case err == nil && ok && string(v) != markers[1]:
		t.Fatalf("served a value the chain never signed: %q", v)
	case err == nil && !ok:
		t.Fatal("the record vanished without an error")
	}
	if err != nil && !errors.Is(err, intentlog.ErrCorrupt) {
		t.Fatalf("reading the corrupt record: %v", err)
	}
	for ac := range n.Commits(ctx, 1, false) {
		if ac.Err != nil {
			if !errors.Is(ac.Err, intentlog.ErrCorrupt) {
				t.Fatalf("reading the chain: %v", ac.Err)
			}
			break
		}
		if _, err := chain.Verify(ac.Raw, n.Chain()); err != nil {
			t.Fatalf("served commit %d does not verify: %v", ac.Seq, err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "the device says its storage is corrupt", func() bool {
		return errors.Is(n.Health(), node.ErrStorage)
	})
	stopFaulty()
	repairAndRejoin(t, c, d)
	checkClean(t, c)
}

// A full disk under the holder (a size-limited tmpfs; root only): it stops signing
// and gives the lease up, another device takes over and the chain goes on, /healthz
// says why; once space is freed the device recovers and catches up. Nothing on disk
// is lost, nothing panics.
func TestIntegrityFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a size-limited tmpfs")
	}
	dir := t.TempDir()
	c, err := NewCluster(Config{Nodes: 3, Dir: dir, SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	full := c.Devices()[0]
	if err := os.MkdirAll(full.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", full.Dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", full.Dir).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, _, err := c.WaitHolder(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h != full {
		if err := c.Transfer(ctx, h, full); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "the device on the small disk holds", func() bool { return full.Node().Holds() })
	}
	load, err := StartLoad(ctx, LoadConfig{Targets: c.LoadTargets(), Rate: 100, Max: 1500, Retries: 5, Prefix: "full"})
	if err != nil {
		t.Fatal(err)
	}
	// Fill the disk.
	filler := filepath.Join(full.Dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	_ = f.Close()
	testutil.WaitFor(t, 30*time.Second, "the full device unhealthy, another holding", func() bool {
		if testing.Verbose() {
			st, _ := c.State(full)
			t.Logf("full device: healthy %v problem %q holds %v head %d", st.Healthy, st.Problem, st.Lease.HeldByMe, st.Head.Seq)
		}
		n := full.Node()
		if n == nil || n.Health() == nil || n.Holds() {
			return false
		}
		h, _, ok := c.Holder()
		return ok && h != full
	})
	if st, _ := c.State(full); st.Healthy || !strings.Contains(st.Problem, "space") {
		t.Fatalf("state of the full device: healthy %v, problem %q", st.Healthy, st.Problem)
	}
	// Free the space: it recovers by itself and catches up.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	<-load.Done()
	testutil.WaitFor(t, 60*time.Second, "the device recovered", func() bool {
		n := full.Node()
		return n != nil && n.Health() == nil
	})
	res := checkClean(t, c, load.Acks()...)
	if res.Commits == 0 || res.Acked == 0 {
		t.Fatalf("nothing signed: %+v", res)
	}
}
