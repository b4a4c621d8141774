package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// TestTermRaftNeverStoredDoesNotFence: the mark keeps the terms Raft stored, not the
// terms of messages that reached the transport. The simulator's seed 300229 (mixed
// profile): a device removed from the configuration (its Raft stops) still received
// a vote request of a later term; the mark took that term, Raft never stored it, and
// when the device was added back and restarted its stored term was below the mark's:
// it was fenced as a restored older copy, refused every vote, and with another
// member down no leader could be elected (liveness lost for good). A data dir
// really behind what Raft stored is still fenced.
func TestTermRaftNeverStoredDoesNotFence(t *testing.T) {
	cfg := Config{DataDir: filepath.Join(t.TempDir(), "d")}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	f, err := newFence(cfg, "n0", logger)
	if err != nil {
		t.Fatal(err)
	}
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
		g.decide(cfg.DataDir, 10, 3) // its log: entries up to 10, term 3
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
