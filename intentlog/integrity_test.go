package intentlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

const marker = "FIND-ME-IN-RAFT-DB-0123456789"

// flipInFile flips a bit in the middle of every copy of needle in the file at path
// (bbolt may keep stale copies in free pages) and reports how many it found.
func flipInFile(t *testing.T, path string, needle []byte) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := bytes.Index(b, needle); i >= 0; {
		b[i+len(needle)/2] ^= 0x01
		n++
		j := bytes.Index(b[i+1:], needle)
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if n == 0 {
		t.Fatalf("%q not found in %s", needle, path)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

func openDir(t *testing.T, dir, id string) (*Log, error) {
	t.Helper()
	_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
	l, err := Open(Config{Dir: dir, LocalID: raft.ServerID(id), Verify: testVerify, Logger: quietLogger(),
		Raft: fastRaft, SnapshotThreshold: 1 << 30, SnapshotInterval: time.Hour}, tr)
	if err == nil {
		t.Cleanup(func() { l.Close() })
	}
	return l, err
}

// oneNodeWithMarker runs a one-node cluster, proposes an intent whose value is marker,
// stops it cleanly and returns its data directory and the intent entry's index.
func oneNodeWithMarker(t *testing.T) (dir string, index uint64) {
	t.Helper()
	c := newCluster(t, 1, nil)
	c.propose(one(put("a", "c/1", "before")))
	res := c.propose(one(put("m", "c/2", marker)))
	c.propose(one(put("b", "c/3", "after")))
	dir = c.nodes[0].dir
	c.stop(0)
	return dir, res.Index
}

func wantCorruptFile(t *testing.T, err error, index uint64) {
	t.Helper()
	var ce *CorruptFileError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.File != RaftFile {
		t.Fatalf("Open = %v, want a raft.db CorruptFileError", err)
	}
	if index > 0 && ce.Index != index {
		t.Fatalf("first bad index %d, want %d (%v)", ce.Index, index, err)
	}
	for _, s := range []string{"raft.db", "baton repair"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%q does not say %q", err, s)
		}
	}
	if index > 0 && !strings.Contains(err.Error(), "log entry "+strconv.FormatUint(index, 10)) {
		t.Fatalf("%q does not name entry %d", err, index)
	}
}

// A flipped byte inside a log entry's payload: Open refuses before Raft starts, naming
// raft.db, the entry and the way out.
func TestOpenRefusesFlippedLogEntry(t *testing.T) {
	dir, index := oneNodeWithMarker(t)
	flipInFile(t, filepath.Join(dir, RaftFile), []byte(marker))
	_, err := openDir(t, dir, "n0")
	wantCorruptFile(t, err, index)
}

func TestOpenRefusesTruncatedRaftFile(t *testing.T) {
	dir, _ := oneNodeWithMarker(t)
	p := filepath.Join(dir, RaftFile)
	hwm := highWater(t, p)
	for _, size := range []int64{hwm - int64(os.Getpagesize()), hwm / 2, 3 * 4096, 100} {
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		_, err := openDir(t, dir, "n0")
		wantCorruptFile(t, err, 0)
	}
}

// zeroPages zeroes the bbolt pages from page first on (page 0 and 1 are the meta pages).
func zeroPages(t *testing.T, path string, first int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	for i := first * ps; i < len(b); i++ {
		b[i] = 0
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesZeroedRaftPages(t *testing.T) {
	dir, _ := oneNodeWithMarker(t)
	zeroPages(t, filepath.Join(dir, RaftFile), 2)
	_, err := openDir(t, dir, "n0")
	wantCorruptFile(t, err, 0)
}

// A truncated or zeroed state.db is set aside and the state rebuilt from the log: Open
// succeeds and the node ends where it was.
func TestOpenRebuildsBadStateFile(t *testing.T) {
	for name, damage := range map[string]func(p string){
		"truncated": func(p string) {
			if err := os.Truncate(p, highWater(t, p)-int64(os.Getpagesize())); err != nil {
				t.Fatal(err)
			}
		},
		"zeroed pages": func(p string) { zeroPages(t, p, 2) },
		"tiny":         func(p string) { _ = os.Truncate(p, 10) },
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1, nil)
			res := c.workload("w", 20)
			want := c.converge(res.Index)
			dir := c.nodes[0].dir
			c.stop(0)
			damage(filepath.Join(dir, StateFile))
			c.start(0)
			if _, err := os.Stat(filepath.Join(dir, StateFile+".corrupt")); err != nil {
				t.Fatalf("bad state.db not set aside: %v", err)
			}
			if got := c.converge(res.Index); !bytes.Equal(got, want) {
				t.Fatal("rebuilt state differs")
			}
		})
	}
}

// Repair: the corrupt device keeps its term and vote, loses its log and state, and
// resyncs from the others (here by snapshot: the leader compacted its log).
func TestRepairResyncsFromTheOthers(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 2 })
	c.workload("a", 5)
	var victim int
	for i, nd := range c.nodes {
		if nd.log.Raft().State() != raft.Leader {
			victim = i
		}
	}
	res := c.propose(one(put("m", "c/m", marker)))
	c.converge(res.Index)
	nd := c.nodes[victim]
	c.stop(victim)
	res = c.workload("b", 5)
	if err := c.leader().log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}

	termBefore := stableTerm(t, nd.dir)
	flipInFile(t, filepath.Join(nd.dir, RaftFile), []byte(marker))
	if _, err := openDir(t, nd.dir, string(nd.id)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of the corrupt device: %v", err)
	}
	if err := Repair(nd.dir); err != nil {
		t.Fatal(err)
	}
	if got := stableTerm(t, nd.dir); got != termBefore || got == 0 {
		t.Fatalf("term after repair %d, before %d", got, termBefore)
	}
	if _, err := os.Stat(filepath.Join(nd.dir, RaftFile+".corrupt")); err != nil {
		t.Fatalf("old raft.db not kept: %v", err)
	}
	for _, gone := range []string{StateFile, "snapshots"} {
		if _, err := os.Stat(filepath.Join(nd.dir, gone)); !os.IsNotExist(err) {
			t.Fatalf("%s still there after repair: %v", gone, err)
		}
	}
	c.start(victim)
	c.converge(res.Index)
	if n := c.nodes[victim].log.fsm.restores.Load(); n != 1 {
		t.Fatalf("the repaired node restored %d snapshots, want 1 (resync by snapshot)", n)
	}
}

func stableTerm(t *testing.T, dir string) uint64 {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, RaftFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := s.GetUint64([]byte("CurrentTerm"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Repair refuses to run on a device that is running, and finishes an interrupted swap.
func TestRepairSafety(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.propose(one(put("a", "c/1", "v")))
	dir := c.nodes[0].dir
	if err := Repair(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Repair of a running device: %v", err)
	}
	c.stop(0)
	term := stableTerm(t, dir)
	// Interrupted after the old raft.db was set aside, before the swap.
	if err := writeStable(filepath.Join(dir, repairTemp), map[string][]byte{"CurrentTerm": u64key(term)}); err != nil {
		t.Fatal(err)
	}
	if _, err := openDir(t, dir, "n0"); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Open after an interrupted repair: %v", err)
	}
	if _, err := setAside(filepath.Join(dir, RaftFile), "corrupt"); err != nil {
		t.Fatal(err)
	}
	if err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	if got := stableTerm(t, dir); got != term {
		t.Fatalf("term %d, want %d", got, term)
	}
	// Without a readable stable store it refuses (the vote would be lost).
	empty := t.TempDir()
	if err := writeStable(filepath.Join(empty, RaftFile), map[string][]byte{}); err != nil {
		t.Fatal(err)
	}
	if err := Repair(empty); err == nil || !strings.Contains(err.Error(), "vote twice") {
		t.Fatalf("Repair without a stable store: %v", err)
	}
}

// highWater returns the size the bbolt database at path needs (the file may be longer:
// bbolt grows it in steps, and cutting the unused tail is no damage).
func highWater(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	_ = db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	return size
}

// A gap in the log at or below the latest snapshot is how hashicorp/raft leaves a
// follower that installed the leader's snapshot while its own log was behind (it
// keeps its old entries and appends the leader's after the snapshot's index): Open
// accepts it, since Raft starts from the snapshot and never reads there. A gap above
// the snapshot is still refused (seed 4334 of testnet/sim).
func TestOpenAcceptsLogGapUnderSnapshot(t *testing.T) {
	c := newCluster(t, 1, nil)
	for i := range 8 {
		c.propose(one(put(fmt.Sprintf("a%d", i), "c/1", "v")))
	}
	nd := c.nodes[0]
	if err := nd.log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	snap := nd.log.Raft().LastIndex()
	for i := range 4 {
		c.propose(one(put(fmt.Sprintf("b%d", i), "c/1", "v")))
	}
	dir := nd.dir
	c.stop(0)
	if got := latestSnapshotIndex(dir); got != snap {
		t.Fatalf("latest snapshot index %d, want %d", got, snap)
	}
	deleteEntries := func(min, max uint64) {
		t.Helper()
		s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, RaftFile)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(min, max); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deleteEntries(snap-2, snap) // a gap ending at the snapshot
	l, err := openDir(t, dir, "n0")
	if err != nil {
		t.Fatalf("Open with a gap under the snapshot: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	deleteEntries(snap+1, snap+1) // the first entry after it
	_, err = openDir(t, dir, "n0")
	wantCorruptFile(t, err, snap+1)
}

// A start refused on a damaged raft.db leaves no lock behind in the process: bbolt can
// fail inside Open after it took the file's lock (a page past the end of a cut file),
// and a program that puts the file right and opens it again in the same process (an
// embedder retrying node.New) must get the file, not wait for that lock for ever
// (docs/DRILLS.md, seed 680274).
func TestRefusedStartLeavesNoLock(t *testing.T) {
	dir, _ := oneNodeWithMarker(t)
	p := filepath.Join(dir, RaftFile)
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	hwm := highWater(t, p)
	for _, size := range []int64{hwm - int64(os.Getpagesize()), hwm / 2, 3 * 4096} {
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		_, err := openDir(t, dir, "n0")
		wantCorruptFile(t, err, 0)
		if err := os.WriteFile(p, orig, 0o600); err != nil { // the same inode, put right
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			l, err := openDir(t, dir, "n0")
			if err == nil {
				err = l.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("cut to %d, put right: open = %v", size, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("cut to %d, put right: open still waits after 20 s (a lock left behind by the refused start)", size)
		}
	}
}
