package intentlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// crash stops node i like a machine crash would leave it: Raft's stores are closed
// (what they fsynced is durable), but the state file is never synced nor marked clean.
func (c *testCluster) crash(i int) {
	nd := c.nodes[i]
	for _, o := range c.nodes {
		if o != nd && o.trans != nil {
			o.trans.Disconnect(raft.ServerAddress(nd.id))
		}
	}
	l := nd.log
	l.closed.Store(true)
	_ = l.raft.Shutdown().Error()
	l.fsm.notify.close()
	_ = l.fsm.db.Close() // no Sync, no CleanFile
	_ = l.store.Close()
	nd.log = nil
}

func TestStateFileMarkedCleanOnlyByClose(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	h.mustAccept(one(put("a", "c/a", "1")))
	if _, err := os.Stat(filepath.Join(dir, CleanFile)); !os.IsNotExist(err) {
		t.Fatalf("clean marker while open: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CleanFile)); err != nil {
		t.Fatalf("no clean marker after Close: %v", err)
	}
	// Clean: the state is kept.
	f, err = NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	if v := f.View(); v.AppliedIndex != 1 || v.Pending != 1 {
		t.Fatalf("state after a clean reopen: %+v", v)
	}
	// Unclean (closed without Close): the state is set aside, not trusted.
	_ = f.db.Close()
	f.db = nil
	f, err = NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v := f.View(); v.AppliedIndex != 0 || v.Pending != 0 {
		t.Fatalf("state after an unclean reopen: %+v", v)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile+".unclean")); err != nil {
		t.Fatalf("unclean state not set aside: %v", err)
	}
}

// After a crash the state is rebuilt from Raft's snapshot and log: the node converges
// to the same state, with every entry applied exactly once.
func TestClusterCrashRebuildsStateFromLog(t *testing.T) {
	c := newCluster(t, 3, nil)
	res := c.workload("a", 5)
	c.converge(res.Index)
	victim := -1
	for i, nd := range c.nodes {
		if nd.log.Raft().State() != raft.Leader {
			victim = i
		}
	}
	// A snapshot on the victim, then more entries: the rebuild needs both.
	if err := c.nodes[victim].log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	res = c.workload("b", 5)
	c.converge(res.Index)
	want := c.nodes[victim].log.Rejections()[ReasonBadPath]
	c.crash(victim)
	res = c.workload("c", 3)
	c.start(victim)
	if _, err := os.Stat(filepath.Join(c.nodes[victim].dir, StateFile+".unclean")); err != nil {
		t.Fatalf("crashed state file not set aside: %v", err)
	}
	c.converge(res.Index) // compares dumps across nodes
	if got := c.nodes[victim].log.Rejections()[ReasonBadPath]; got != want+1 {
		t.Fatalf("rejections after the rebuild %d, want %d (an entry lost or applied twice?)", got, want+1)
	}
}
