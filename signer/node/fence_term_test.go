package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
)

// testFence is device n0's fence over a new data dir, with its config.
func testFence(t *testing.T) (Config, *fence) {
	t.Helper()
	cfg := Config{DataDir: filepath.Join(t.TempDir(), "d")}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := newFence(cfg, "n0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, f
}

// TestTermRaftNeverStoredDoesNotFence: the mark keeps the terms Raft stored, not the
// terms of messages that reached the transport. The simulator's seed 300229 (mixed
// profile): a device removed from the configuration (its Raft stops) still received
// a vote request of a later term; the mark took that term, Raft never stored it, and
// when the device was added back and restarted its stored term was below the mark's:
// it was fenced as a restored older copy, refused every vote, and with another
// member down no leader could be elected (liveness lost for good). A data dir
// really behind what Raft stored is still fenced.
func TestTermRaftNeverStoredDoesNotFence(t *testing.T) {
	cfg, f := testFence(t)
	logger := slog.New(slog.DiscardHandler)
	f.sawTerm(3) // Raft stores term 3 (intentlog.Config.OnTerm)
	// Messages of term 7 reach the transport of a Raft that has stopped: it never
	// stores their term.
	for _, cmd := range []any{&raft.RequestVoteRequest{Term: 7}, &raft.AppendEntriesRequest{Term: 7},
		&raft.InstallSnapshotRequest{Term: 7}} {
		f.filter(raft.RPC{Command: cmd, RespChan: make(chan raft.RPCResponse, 1)})
	}
	restart := func() *fence {
		t.Helper()
		g, err := newFence(cfg, "n0", logger)
		if err != nil {
			t.Fatal(err)
		}
		g.decide(cfg.DataDir, intentlog.StartState{LastIndex: 10, Term: 3}) // its log: entries up to 10, term 3
		return g
	}
	if g := restart(); g.armed.Load() {
		t.Fatalf("fenced at the restart although Raft stored no term above 3: %s", g.reason)
	}
	// Raft stores term 5, then the data dir is put back to a copy at term 3.
	f.sawTerm(5)
	if g := restart(); !g.armed.Load() {
		t.Fatal("a data dir whose term is behind the term Raft stored was not fenced")
	}
}

// TestFloorRefusalMovesPreVoteCandidateOn: a pre-vote does not raise the candidate's
// term, and hashicorp/raft's candidate adopts a refusal's term only when it is above
// the term it asked for. A refusal for a term at the floor answered with the floor
// itself left the candidate asking for that same term for ever. The simulator's seed
// 1570032 (repair-crash, with the leader's batches sent ahead): a restored device
// with floor 3 and a repaired one refused every pre-vote of the one device that held
// the whole log, which asked for term 3 (its term was 2) for 12 s, and no leader was
// elected again (liveness lost for good). A refusal because of the floor now answers
// a term above it; an armed fence still answers below the request (a device that is
// catching up must not move anyone's term).
func TestFloorRefusalMovesPreVoteCandidateOn(t *testing.T) {
	_, f := testFence(t)
	f.floor.Store(3)
	preVote := func(term uint64) *raft.RequestPreVoteResponse {
		t.Helper()
		ch := make(chan raft.RPCResponse, 1)
		if !f.filter(raft.RPC{Command: &raft.RequestPreVoteRequest{Term: term}, RespChan: ch}) {
			t.Fatalf("a pre-vote for term %d passed the fence (floor %d, armed %v)", term, f.floor.Load(), f.armed.Load())
		}
		return (<-ch).Response.(*raft.RequestPreVoteResponse)
	}
	for _, term := range []uint64{1, 2, 3} {
		if r := preVote(term); r.Granted || r.Term <= term {
			t.Fatalf("pre-vote for term %d at floor 3: answered %+v; want a refusal with a term above %d (the candidate moves on)", term, r, term)
		}
	}
	f.armed.Store(true)
	if r := preVote(5); r.Granted || r.Term >= 5 {
		t.Fatalf("an armed fence answered a pre-vote for term 5 with %+v; want a refusal below 5", r)
	}
}

// TestPendingStartGuardsTheActs: a start that knows other members asks them what they
// remember of it before it takes part (peermemory.go), and until they have answered
// it is not known to be current: a whole-disk restore whose copy still names it the
// lease holder within the TTL would otherwise sign from its old head while it asks,
// a second signature for a seq the others have. The pending fence guards the claim
// and the signature (Health) as an armed one does, not only the votes.
func TestPendingStartGuardsTheActs(t *testing.T) {
	cfg, f := testFence(t)
	f.decide(cfg.DataDir, intentlog.StartState{LastIndex: 10, Term: 3, Voters: []raft.ServerID{"n0", "n1", "n2"}})
	if !f.pending.Load() {
		t.Fatal("a start that knows two other voters did not ask them (not pending)")
	}
	if up, why := f.guards(); !up || why == "" {
		t.Fatalf("a pending start does not guard the claim and the signature (guards = %v, %q)", up, why)
	}
	f.pending.Store(false) // the members answered: nothing more than it has
	if up, why := f.guards(); up {
		t.Fatalf("after the members answered, the fence still guards: %q", why)
	}
}
