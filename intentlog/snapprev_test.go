package intentlog

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// A follower that caught up by snapshot and then appended entries past it must still
// accept an AppendEntries whose previous entry is the snapshot's last one. A leader
// sends exactly that when its first AppendEntries after the snapshot was stored but
// its answer was lost (a slow link: the request times out at the leader). hashicorp/
// raft v1.7.3's follower only looks in its log, where that entry never was, refuses,
// and the leader walks back, sends the snapshot again, and again for ever: the
// simulator's seeds 680209 (disk) and 690374 (repair) never converged
// (docs/DRILLS.md). The Raft paper's rule is that the snapshot's last index and term
// stand for that entry; snapPrevLogs answers so.
func TestFollowerAcceptsPrevAtItsSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 2 })
	c.workload("a", 5)
	victim := -1
	for i, nd := range c.nodes {
		if nd.log.Raft().State() != raft.Leader {
			victim = i
		}
	}
	nd := c.nodes[victim]
	c.stop(victim)
	c.workload("b", 5)
	if err := c.leader().log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.workload("c", 2)                     // past the snapshot, so the leader's log starts above the victim's
	if err := Repair(nd.dir); err != nil { // an empty log: it catches up by snapshot
		t.Fatal(err)
	}
	c.start(victim)
	res := c.workload("d", 5) // entries the victim appends after the snapshot
	c.converge(res.Index)
	if n := nd.log.fsm.restores.Load(); n != 1 {
		t.Fatalf("the victim restored %d snapshots, want 1", n)
	}
	metas, err := nd.log.snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("the victim's snapshots: %v, %v", metas, err)
	}
	snap := metas[0]
	var l raft.Log
	if err := nd.log.store.GetLog(snap.Index, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("the victim's log holds the snapshot's entry %d (%v): the case is not built", snap.Index, err)
	}
	if last, _ := nd.log.store.LastIndex(); last <= snap.Index {
		t.Fatalf("the victim's log ends at %d, not past its snapshot %d", last, snap.Index)
	}

	// The leader's retry of that first AppendEntries, as a heartbeat-sized request.
	ld := c.leader()
	_, probe := raft.NewInmemTransport(raft.ServerAddress(ld.id))
	probe.Connect(raft.ServerAddress(nd.id), nd.trans)
	req := raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(ld.id), Addr: []byte(ld.id)},
		Term:              ld.log.Raft().CurrentTerm(),
		PrevLogEntry:      snap.Index,
		PrevLogTerm:       snap.Term,
		LeaderCommitIndex: ld.log.Raft().CommitIndex(),
	}
	var resp raft.AppendEntriesResponse
	if err := probe.AppendEntries(nd.id, raft.ServerAddress(nd.id), &req, &resp); err != nil {
		t.Fatal(err)
	}
	if !resp.Success {
		t.Fatalf("the follower refused an AppendEntries after its snapshot's entry %d (term %d); its last log %d", snap.Index, snap.Term, resp.LastLog)
	}
	// A wrong term at that index is still a mismatch.
	req.PrevLogTerm = snap.Term + 1
	if err := probe.AppendEntries(nd.id, raft.ServerAddress(nd.id), &req, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Success {
		t.Fatal("the follower accepted a previous entry whose term differs from its snapshot's")
	}
	res = c.workload("e", 2)
	c.converge(res.Index)
}

// snapPrevLogs' rule on its own: the placeholder only for the newest snapshot's last
// index, only when the log holds neither that entry nor the one below it.
func TestSnapPrevLogsRule(t *testing.T) {
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	s := snapPrevLogs{LogStore: store, snaps: snaps}
	var l raft.Log
	if err := s.GetLog(20, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("no snapshot: %v", err)
	}
	_, tr := raft.NewInmemTransport("x")
	sink, err := snaps.Create(raft.SnapshotVersionMax, 20, 7, raft.Configuration{}, 1, tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.StoreLogs([]*raft.Log{{Index: 21, Term: 7, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	// After a snapshot install: the log starts above the snapshot.
	if err := s.GetLog(20, &l); err != nil || l.Index != 20 || l.Term != 7 || l.Type != raft.LogNoop || l.Data != nil {
		t.Fatalf("snapshot's last index: %+v, %v", l, err)
	}
	for _, i := range []uint64{19, 22} {
		if err := s.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("index %d: %v, want not found", i, err)
		}
	}
	if err := s.GetLog(21, &l); err != nil || string(l.Data) != "x" {
		t.Fatalf("a held entry: %+v, %v", l, err)
	}
	// The entry below the snapshot's is held (a log with a gap at the snapshot's
	// index): a leader could read upwards into the placeholder, so there is none.
	if err := store.StoreLogs([]*raft.Log{{Index: 19, Term: 6, Type: raft.LogCommand}}); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(20, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 19 held: %v, want not found", err)
	}
}
