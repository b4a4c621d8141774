package testnet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

// TestRaftLogReaders: the running node's ForEachEntry and, once it is down,
// ReadRaftLog see the same Commit entries, one for each applied commit at least;
// ReadRaftLog refuses a raft.db a running node holds.
func TestRaftLogReaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := NewCluster(Config{Nodes: 3, Dir: t.TempDir(), SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, _, err := c.WaitHolder(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := h.Node().Submit(ctx, testutil.Put(fmt.Sprint("r", i)), node.WaitSigned); err != nil {
			t.Fatal(err)
		}
	}
	head := h.Node().Log().View().Head.Seq
	commits := func(read func(uint64, func(intentlog.RaftEntry) error) error) (map[uint64]int, uint64) {
		t.Helper()
		seen := map[uint64]int{}
		var last uint64
		if err := read(1, func(e intentlog.RaftEntry) error {
			if e.Index <= last {
				t.Fatalf("index %d after %d", e.Index, last)
			}
			last = e.Index
			if ce, ok := e.Entry.(intentlog.CommitEntry); ok {
				cm, err := chain.Verify(ce.Raw, c.Chain())
				if err != nil {
					t.Fatalf("index %d: %v", e.Index, err)
				}
				seen[cm.Seq]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return seen, last
	}
	live, lastLive := commits(h.Node().Log().ForEachEntry)
	for s := uint64(1); s <= head; s++ {
		if live[s] == 0 {
			t.Fatalf("seq %d applied but not in the running node's raft log (%v)", s, live)
		}
	}
	if err := intentlog.ReadRaftLog(h.Dir, 1, func(intentlog.RaftEntry) error { return nil }); err == nil {
		t.Fatal("ReadRaftLog opened the raft.db of a running node")
	}
	if err := c.Kill(h); err != nil {
		t.Fatal(err)
	}
	disk, lastDisk := commits(func(from uint64, fn func(intentlog.RaftEntry) error) error {
		return intentlog.ReadRaftLog(h.Dir, from, fn)
	})
	if lastDisk < lastLive {
		t.Fatalf("raft.db ends at %d, the running node's log at %d", lastDisk, lastLive)
	}
	for s, k := range live {
		if disk[s] < k {
			t.Fatalf("seq %d: %d entries live, %d on disk", s, k, disk[s])
		}
	}
}
