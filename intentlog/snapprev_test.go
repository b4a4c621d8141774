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
