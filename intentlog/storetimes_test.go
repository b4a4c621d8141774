package intentlog

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// failingStore fails StoreLogs while fail is set.
type failingStore struct {
	*raft.InmemStore
	fail bool
}

func (s *failingStore) StoreLogs(logs []*raft.Log) error {
	if s.fail {
		return errors.New("disk full")
	}
	return s.InmemStore.StoreLogs(logs)
}

func (s *failingStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func TestStoreTimes(t *testing.T) {
	var now time.Duration
	st := newStoreTimes(func() time.Duration { return now })
	inner := &failingStore{InmemStore: raft.NewInmemStore()}
	s := timedLogStore{LogStore: inner, t: st}
	store := func(lo, hi uint64) error {
		var logs []*raft.Log
		for i := lo; i <= hi; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: 1})
		}
		return s.StoreLogs(logs)
	}
	want := func(index uint64, at time.Duration, ok bool) {
		t.Helper()
		got, gok := st.get(index)
		if gok != ok || (ok && got != at) {
			t.Fatalf("StoredAt(%d) = %v, %v; want %v, %v", index, got, gok, at, ok)
		}
	}

	now = 10
	if err := store(1, 3); err != nil {
		t.Fatal(err)
	}
	want(1, 10, true)
	want(3, 10, true)
	want(4, 0, false)
	want(0, 0, false)

	// A resent or replaced entry counts from its later store.
	now = 20
	if err := store(3, 3); err != nil {
		t.Fatal(err)
	}
	want(3, 20, true)
	want(2, 10, true)

	// Raft deletes a conflicting tail: those indexes have no time until stored again.
	if err := s.DeleteRange(2, 3); err != nil {
		t.Fatal(err)
	}
	want(1, 10, true)
	want(2, 0, false)
	want(3, 0, false)

	// A failed write leaves no time behind.
	inner.fail = true
	now = 30
	if err := store(2, 2); err == nil {
		t.Fatal("the failing store stored")
	}
	want(2, 0, false)
	inner.fail = false

	// Bounded: an index storeTimesSize later evicts the slot; a huge delete clears
	// what it covers, in bounded time.
	now = 40
	if err := store(1+storeTimesSize, 1+storeTimesSize); err != nil {
		t.Fatal(err)
	}
	want(1, 0, false)
	want(1+storeTimesSize, 40, true)
	if err := store(5, 6); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(6, 1<<20); err != nil {
		t.Fatal(err)
	}
	want(5, 40, true)
	want(6, 0, false)
	want(1+storeTimesSize, 0, false)
	// A batch longer than the ring keeps its last storeTimesSize indexes.
	now = 50
	big := uint64(3 * storeTimesSize)
	st.note(1, big)
	want(big, 50, true)
	want(big-storeTimesSize+1, 50, true)
	want(big-storeTimesSize, 0, false)

	st.clear()
	want(big, 0, false)

	var none *storeTimes // no Config.Mono
	none.note(1, 2)
	none.forget(1, 2)
	none.clear()
	if _, ok := none.get(1); ok {
		t.Fatal("a nil storeTimes remembers")
	}
}

// Every replica notes when it stored an entry: after the proposal began and no later
// than its own apply. A restart remembers nothing (the log is replayed, not stored),
// and a replica that caught up from a snapshot has no time for what it restored.
func TestStoredAtOnEveryReplica(t *testing.T) {
	start := time.Now()
	mono := func() time.Duration { return time.Since(start) }
	c := newCluster(t, 3, func(cfg *Config) { cfg.Mono = mono; cfg.TrailingLogs = 2 })

	proposed := mono()
	res := c.propose(ClaimEntry{Holder: "a", Epoch: 1, TS: 1, TTL: 1000})
	if !res.Accepted {
		t.Fatalf("claim: %+v", res)
	}
	for _, nd := range c.nodes {
		waitFor(t, "apply everywhere", func() bool { return nd.log.View().AppliedIndex >= res.Index })
		applied := mono()
		at, ok := nd.log.StoredAt(res.Index)
		if !ok || at < proposed || at > applied {
			t.Fatalf("%s: StoredAt(%d) = %v, %v; want within [%v, %v]", nd.id, res.Index, at, ok, proposed, applied)
		}
		if nd.log.View().Lease.Rev != res.Index {
			t.Fatalf("%s: the record's rev %d is not the entry's index %d", nd.id, nd.log.View().Lease.Rev, res.Index)
		}
	}

	// A restarted replica replays its log: no store times for what it had.
	c.stop(2)
	c.start(2)
	waitFor(t, "replay", func() bool { return c.nodes[2].log.View().AppliedIndex >= res.Index })
	if at, ok := c.nodes[2].log.StoredAt(res.Index); ok {
		t.Fatalf("restarted replica has a store time %v for a replayed entry", at)
	}

	// A replica that installs a snapshot has none for what the snapshot covers, even
	// for an index it stored itself before it fell behind.
	lagging := -1
	for i, nd := range c.nodes {
		if nd != c.leader() && i != 2 {
			lagging = i
			break
		}
	}
	if lagging < 0 {
		t.Skip("premise: node 2 (restarted) is the only follower")
	}
	lg := c.nodes[lagging]
	if _, ok := lg.log.StoredAt(res.Index); !ok {
		t.Fatalf("premise: %s has no store time for index %d", lg.id, res.Index)
	}
	link := func(connect bool) {
		for _, o := range c.nodes {
			if o == lg {
				continue
			}
			if connect {
				o.trans.Connect(raft.ServerAddress(lg.id), lg.trans)
				lg.trans.Connect(raft.ServerAddress(o.id), o.trans)
			} else {
				o.trans.Disconnect(raft.ServerAddress(lg.id))
				lg.trans.Disconnect(raft.ServerAddress(o.id))
			}
		}
	}
	link(false)
	var last Result
	for i := range 10 {
		ld := c.leader()
		if ld == lg {
			t.Skip("premise: the cut-off node leads")
		}
		last = c.propose(RenewEntry{Holder: "a", Epoch: 1, PrevRev: ld.log.View().Lease.Rev, TS: int64(2 + i)})
		if !last.Accepted {
			t.Fatalf("renew: %+v", last)
		}
	}
	if err := c.leader().log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	link(true)
	c.converge(last.Index)
	if n := lg.log.fsm.restores.Load(); n != 1 {
		t.Fatalf("premise: the lagging node restored %d snapshots, want 1", n)
	}
	for _, i := range []uint64{res.Index, last.Index} {
		if at, ok := lg.log.StoredAt(i); ok {
			t.Fatalf("index %d, covered by the restored snapshot, has a store time %v", i, at)
		}
	}
}
