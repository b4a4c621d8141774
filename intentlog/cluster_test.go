package intentlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/internal/knobs"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func fastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

type testNode struct {
	id    raft.ServerID
	dir   string
	trans *raft.InmemTransport
	log   *Log // nil while down
}

type testCluster struct {
	t     testing.TB
	nodes []*testNode
	tweak func(*Config)
	wrap  func(i int, t *raft.InmemTransport) raft.Transport // the transport node i's Raft runs on (nil: t)
}

func newCluster(t testing.TB, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	return newClusterWrapped(t, n, tweak, nil)
}

// newClusterWrapped is newCluster with each node's transport wrapped by wrap.
func newClusterWrapped(t testing.TB, n int, tweak func(*Config), wrap func(i int, t *raft.InmemTransport) raft.Transport) *testCluster {
	t.Helper()
	c := &testCluster{t: t, tweak: tweak, wrap: wrap}
	var servers []raft.Server
	for i := 0; i < n; i++ {
		id := raft.ServerID(fmt.Sprintf("n%d", i))
		c.nodes = append(c.nodes, &testNode{id: id, dir: filepath.Join(t.TempDir(), string(id))})
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(id)})
	}
	for i := range c.nodes {
		c.start(i)
	}
	if err := c.nodes[0].log.Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[0].log.Bootstrap(servers); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("second bootstrap: %v", err)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	c.leader()
	return c
}

func (c *testCluster) start(i int) {
	c.t.Helper()
	nd := c.nodes[i]
	_, nd.trans = raft.NewInmemTransport(raft.ServerAddress(nd.id))
	for _, o := range c.nodes {
		if o != nd && o.log != nil {
			nd.trans.Connect(raft.ServerAddress(o.id), o.trans)
			o.trans.Connect(raft.ServerAddress(nd.id), nd.trans)
		}
	}
	cfg := Config{Dir: nd.dir, LocalID: nd.id, Verify: testVerify, Logger: quietLogger(),
		Raft: fastRaft, SnapshotThreshold: 1 << 30, SnapshotInterval: time.Hour}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	var trans raft.Transport = nd.trans
	if c.wrap != nil {
		trans = c.wrap(i, nd.trans)
	}
	l, err := Open(cfg, trans)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.log = l
}

func (c *testCluster) stop(i int) {
	nd := c.nodes[i]
	if nd.log == nil {
		return
	}
	for _, o := range c.nodes {
		if o != nd && o.trans != nil {
			o.trans.Disconnect(raft.ServerAddress(nd.id))
		}
	}
	if err := nd.log.Close(); err != nil {
		c.t.Errorf("close %s: %v", nd.id, err)
	}
	if err := nd.log.Close(); err != nil {
		c.t.Errorf("second close %s: %v", nd.id, err)
	}
	nd.log = nil
}

// waitFor polls cond until it holds or 15 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 15*time.Second, what, cond)
}

// waitWithin polls cond until it holds or d passes.
func waitWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func (c *testCluster) leader() *testNode {
	c.t.Helper()
	var ld *testNode
	waitFor(c.t, "a leader", func() bool {
		for _, nd := range c.nodes {
			if nd.log != nil && nd.log.Raft().State() == raft.Leader {
				ld = nd
				return true
			}
		}
		return false
	})
	return ld
}

// propose sends e through the current leader, retrying across leader changes.
func (c *testCluster) propose(e Entry) Result {
	c.t.Helper()
	for attempt := 0; attempt < 50; attempt++ {
		ld := c.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := ld.log.Propose(ctx, e)
		cancel()
		if err == nil {
			return res
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrLeadershipLost) && !errors.Is(err, ErrClosed) {
			c.t.Fatalf("propose: %v", err)
		}
	}
	c.t.Fatal("propose: no stable leader")
	return Result{}
}

// converge waits until every running node applied index and then compares dumps.
func (c *testCluster) converge(index uint64) []byte {
	c.t.Helper()
	var ref []byte
	for _, nd := range c.nodes {
		if nd.log == nil {
			continue
		}
		waitFor(c.t, fmt.Sprintf("%s to apply %d", nd.id, index), func() bool {
			return nd.log.View().AppliedIndex >= index
		})
	}
	// Barrier through the leader so trailing configuration entries are applied too
	// (retried: on a loaded machine leadership may move meanwhile).
	var last uint64
	for attempt := 0; ; attempt++ {
		ld := c.leader().log.Raft()
		err := ld.Barrier(5 * time.Second).Error()
		if err == nil {
			last = ld.AppliedIndex()
			break
		}
		if attempt == 20 {
			c.t.Fatalf("barrier: %v", err)
		}
	}
	for _, nd := range c.nodes {
		if nd.log == nil {
			continue
		}
		waitFor(c.t, "followers to catch up", func() bool { return nd.log.Raft().AppliedIndex() >= last })
		var b bytes.Buffer
		if err := nd.log.Dump(&b); err != nil {
			c.t.Fatal(err)
		}
		if ref == nil {
			ref = b.Bytes()
		} else if !bytes.Equal(ref, b.Bytes()) {
			c.t.Fatalf("replica %s's state differs", nd.id)
		}
	}
	return ref
}

// workload claims the lease for the leader if free, submits intents, and signs them.
func (c *testCluster) workload(prefix string, n int) Result {
	c.t.Helper()
	v := c.leader().log.View()
	if v.Lease.Holder == "" {
		res := c.propose(ClaimEntry{Holder: "signer", Epoch: v.Lease.Epoch + 1, PrevRev: v.Lease.Rev, TS: 1, TTL: 1000})
		// propose retries after a lost leadership (an unknown outcome): an earlier
		// attempt may have applied, and the retry is then refused stale_rev (seen
		// under -race). The leader has applied the retry, so it shows the first.
		if now := c.leader().log.View().Lease; !res.Accepted && (res.Reason != ReasonStaleRev || now.Holder != "signer" || now.Epoch != v.Lease.Epoch+1) {
			c.t.Fatalf("claim: %s", res.Reason)
		}
	}
	for i := 0; i < n; i++ {
		res := c.propose(IntentsEntry{Intents: []Intent{put(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s/%d", prefix, i), "value")}})
		if !res.Accepted {
			c.t.Fatalf("intent: %+v", res)
		}
	}
	// A rejected entry, so rejection counters take part in the comparison.
	if res := c.propose(one(put("bad", "nopath", ""))); res.Accepted {
		c.t.Fatal("bad path accepted")
	}
	ld := c.leader()
	pend, err := ld.log.Pending(0, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	v = ld.log.View()
	cm := testCommit{CommitInfo: CommitInfo{Seq: v.Head.Seq + 1, Epoch: v.Lease.Epoch, Signer: v.Lease.Holder, Ops: pend}, Sig: "ok"}
	if v.Head.Seq > 0 {
		cm.Prev = v.Head.Hash[:]
	}
	res := c.propose(CommitEntry{Raw: cm.encode()})
	if !res.Accepted {
		c.t.Fatalf("commit: %s", res.Reason)
	}
	return res
}

func TestClusterFailoverAndRestart(t *testing.T) {
	c := newCluster(t, 3, nil)
	res := c.workload("a", 5)
	c.converge(res.Index)

	// Followers refuse proposals and name the leader.
	ld := c.leader()
	for _, nd := range c.nodes {
		if nd.log.Raft().State() == raft.Leader {
			continue
		}
		if _, err := nd.log.Propose(context.Background(), one(put("x", "c/x", ""))); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower propose: %v", err)
		}
		if _, err := nd.log.Barrier(context.Background()); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower barrier: %v", err)
		}
		waitFor(t, "the follower to name the leader", func() bool {
			_, id := nd.log.Leader()
			return id != "" && id != nd.id && id == c.leader().id
		})
	}
	ms, err := ld.log.Members()
	if err != nil || len(ms) != 3 {
		t.Fatalf("members %+v %v", ms, err)
	}

	// Leader loss: a new leader is elected and the log carries on.
	old := -1
	for i, nd := range c.nodes {
		if nd == ld {
			old = i
		}
	}
	c.stop(old)
	if nl := c.leader(); nl.id == ld.id {
		t.Fatal("stopped node still leader")
	}
	res = c.workload("b", 5)
	c.converge(res.Index)

	// The old leader reopens from its data dir with its state intact (nothing applied
	// twice while Raft replays its log), then catches up.
	c.start(old)
	c.converge(res.Index)
	if got, want := c.nodes[old].log.Rejections()[ReasonBadPath], uint64(2); got != want {
		t.Fatalf("rejections after restart %d, want %d (an entry applied twice?)", got, want)
	}
	if v, ok, _ := c.nodes[old].log.Record("b/4"); !ok || string(v) != "value" {
		t.Fatalf("record b/4 = %q %v", v, ok)
	}
}

func TestClusterRestartWithSnapshot(t *testing.T) {
	c := newCluster(t, 3, nil)
	res := c.workload("a", 4)
	c.converge(res.Index)
	nd := c.nodes[2]
	if err := nd.log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	res = c.workload("b", 3) // entries after the snapshot
	want := c.converge(res.Index)

	// 1. state.db is at/after the snapshot: Raft must not restore it, and the FSM must
	//    skip replayed entries.
	c.stop(2)
	c.start(2)
	assertDump(t, c.nodes[2].log, want, "reopen with state ahead of snapshot")
	c.converge(res.Index)
	if n := c.nodes[2].log.fsm.restores.Load(); n != 0 {
		t.Fatalf("state.db covered the snapshot but it was restored %d times", n)
	}

	// 2. state.db lost: the snapshot is restored and the log after it replayed.
	c.stop(2)
	if err := os.Remove(filepath.Join(nd.dir, StateFile)); err != nil {
		t.Fatal(err)
	}
	c.start(2)
	if got := c.converge(res.Index); !bytes.Equal(got, want) {
		t.Fatal("state rebuilt from snapshot differs")
	}
	if n := c.nodes[2].log.fsm.restores.Load(); n != 1 {
		t.Fatalf("state.db was lost but the snapshot was restored %d times", n)
	}
}

func assertDump(t *testing.T, l *Log, want []byte, what string) {
	t.Helper()
	var b bytes.Buffer
	if err := l.Dump(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("%s: state differs", what)
	}
}

func TestClusterSnapshotInstall(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 2 })
	res := c.workload("a", 3)
	c.converge(res.Index)

	var lagging int
	for i, nd := range c.nodes {
		if nd != c.leader() {
			lagging = i
			break
		}
	}
	c.stop(lagging)
	res = c.workload("b", 10)
	if err := c.leader().log.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.start(lagging)
	c.converge(res.Index)
	if n := c.nodes[lagging].log.fsm.restores.Load(); n != 1 {
		t.Fatalf("lagging node restored %d snapshots, want 1 (install)", n)
	}
}

func TestProposeErrors(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader().log
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	if _, err := l.Propose(ctx, one(put("i", "c/r", ""))); !errors.Is(err, ErrTimeout) {
		t.Fatalf("expired ctx: %v", err)
	}
	if _, err := l.ApplyEncoded(context.Background(), []byte{1, 2, 3}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed ApplyEncoded: %v", err)
	}
	if _, err := l.ApplyEncoded(context.Background(), make([]byte, MaxEntryBytes+1)); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("huge ApplyEncoded: %v", err)
	}
	b, _ := Encode(one(put("i", "c/r", "v")))
	out, err := l.ApplyEncoded(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := DecodeResult(out)
	if err != nil || !res.Accepted || res.Intents[0].Index != res.Index {
		t.Fatalf("ApplyEncoded result %+v %v", res, err)
	}
	if pend, err := l.Pending(10, 0); err != nil || len(pend) != 1 || string(pend[0].Value) != "v" {
		t.Fatalf("pending %+v %v", pend, err)
	}
	c.stop(0)
	if _, err := l.Propose(context.Background(), one(put("j", "c/r", ""))); !errors.Is(err, ErrClosed) {
		t.Fatalf("propose after close: %v", err)
	}
	if _, err := l.Pending(1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("pending after close: %v", err)
	}
	select {
	case <-l.Watch():
	default:
		t.Fatal("Watch after Close should return a closed channel")
	}
}

func TestOpenValidatesConfig(t *testing.T) {
	_, tr := raft.NewInmemTransport("x")
	good := Config{Dir: t.TempDir(), LocalID: "x", Verify: testVerify, Logger: quietLogger()}
	for name, mod := range map[string]func(*Config){
		"no dir":      func(c *Config) { c.Dir = "" },
		"no id":       func(c *Config) { c.LocalID = "" },
		"no verifier": func(c *Config) { c.Verify = nil },
		"bad raft":    func(c *Config) { c.Raft = func(r *raft.Config) { r.LeaderLeaseTimeout = 10 * r.HeartbeatTimeout } },
	} {
		cfg := good
		mod(&cfg)
		if _, err := Open(cfg, tr); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestLogWatchAndSubscribeOnFollower(t *testing.T) {
	c := newCluster(t, 3, nil)
	ld := c.leader()
	var f *testNode
	for _, nd := range c.nodes {
		if nd != ld {
			f = nd
			break
		}
	}
	w := f.log.Watch()
	sub := f.log.Subscribe()
	defer sub.Close()
	res := c.propose(one(put("w1", "c/w", "v")))
	select {
	case <-w:
	case <-time.After(10 * time.Second):
		t.Fatal("follower's Watch not woken")
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-sub.C:
			if ia, ok := ev.(IntentAccepted); ok && ia.ID == "w1" {
				if ia.Index != res.Index {
					t.Fatalf("event index %d, want %d", ia.Index, res.Index)
				}
				return
			}
		case <-deadline:
			t.Fatal("follower's subscription got no IntentAccepted")
		}
	}
}

func TestWaitApplied(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader().log
	target := l.View().AppliedIndex + 1
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- l.WaitApplied(ctx, target)
	}()
	res := c.propose(one(put("w", "c/w", "")))
	if res.Index < target {
		t.Fatalf("entry at %d, below %d", res.Index, target)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	idx, err := l.Barrier(context.Background())
	if err != nil || idx < res.Index {
		t.Fatalf("barrier index %d (want >= %d), %v", idx, res.Index, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.WaitApplied(ctx, res.Index+100); err != context.DeadlineExceeded {
		t.Fatalf("wait for a future index: %v", err)
	}
}

func TestOpenRefusesStateWithoutRaftStore(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.propose(one(put("i", "c/r", "")))
	dir := c.nodes[0].dir
	c.stop(0)
	if err := os.Remove(filepath.Join(dir, RaftFile)); err != nil {
		t.Fatal(err)
	}
	_, tr := raft.NewInmemTransport("n0")
	_, err := Open(Config{Dir: dir, LocalID: "n0", Verify: testVerify, Logger: quietLogger(), Raft: fastRaft}, tr)
	if !errors.Is(err, ErrInconsistentState) {
		t.Fatalf("open with state.db but no raft.db: %v", err)
	}
}

// Followers apply a lease entry or an intent at once, not after CommitTimeout, and no
// entry is written for it: the leader sends a commit notice (notice.go). With a
// barrier per nudge a graceful handover's every step wrote and fsynced one more entry
// on every replica; and an intent logged while the lease was free waited for
// CommitTimeout on the next holder, which had to apply it before signing (a graceful
// round of 88 ms, TestTraceGraceful).
func TestFollowersLearnByNotice(t *testing.T) {
	c := newCluster(t, 3, slowCommitTimeout)
	ld := c.leader()
	rev := uint64(0)
	for _, mk := range []func() Entry{
		func() Entry { return ClaimEntry{Holder: "n0", Epoch: 1, PrevRev: rev, TS: 1000, TTL: 15000} },
		func() Entry { return RenewEntry{Holder: "n0", Epoch: 1, PrevRev: rev, TS: 2000} },
		func() Entry { return one(put("free", "c/free", "v")) },
		func() Entry { return ReleaseEntry{Holder: "n0", Epoch: 1, PrevRev: rev} },
	} {
		e := mk()
		res := c.propose(e)
		rev = res.Lease.Rev
		if !res.Accepted {
			t.Fatalf("%T: %+v", e, res)
		}
		appliedEverywhere(t, c, fmt.Sprintf("%T", e), res.Index)
		if last := ld.log.raft.LastIndex(); last != res.Index {
			t.Fatalf("%T at index %d: the log's last index is %d (a barrier was written)", e, res.Index, last)
		}
	}
}

// The followers learn an entry at once even when its proposer stopped waiting for it
// (its context ended while the leader wrote it: the outcome was unknown to it, the
// entry still committed): the leader nudges on its apply, not on the proposer's
// answer. A standby whose forwarded claim timed out on its side, while the leader
// went on to commit it, would otherwise learn it won only at CommitTimeout.
func TestFollowersLearnWithoutProposer(t *testing.T) {
	var armed atomic.Bool
	gone := make(chan struct{})
	c := newCluster(t, 3, func(cfg *Config) {
		slowCommitTimeout(cfg)
		cfg.Knobs = &knobs.Intentlog{BeforeLeaderStore: func(first, last uint64) {
			if armed.Load() {
				<-gone // the proposer has given up
			}
		}}
	})
	res := c.propose(one(put("a", "c/a", "v")))
	appliedEverywhere(t, c, "the first intent", res.Index)
	ld := c.leader()
	armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := ld.log.Propose(ctx, ClaimEntry{Holder: "n1", Epoch: 1, PrevRev: 0, TS: 1000, TTL: 15000})
	cancel()
	armed.Store(false)
	close(gone)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("claim proposed while the leader's write was held: %v, want %v", err, ErrTimeout)
	}
	waitWithin(t, 3*time.Second, "the claim applied on every node", func() bool {
		for _, nd := range c.nodes {
			if nd.log.View().Lease.Holder != "n1" {
				return false
			}
		}
		return true
	})
}

// Without commit notices (knobs.Intentlog.BarrierNudges, as over a transport without
// pre-vote, which the wrapper does not pretend to have), a nudge is a barrier: claims and releases are nudged, renewals and intents
// are not (an idle cluster writes no more entries than its renewals).
func TestFollowersLearnByBarrierWithoutNotices(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		slowCommitTimeout(cfg)
		cfg.Knobs = &knobs.Intentlog{BarrierNudges: true}
	})
	ld := c.leader()
	if ld.log.nudger.noticed {
		t.Fatal("commit notices with BarrierNudges")
	}
	res := c.propose(ClaimEntry{Holder: "n0", Epoch: 1, PrevRev: 0, TS: 1000, TTL: 15000})
	if !res.Accepted {
		t.Fatalf("claim: %+v", res)
	}
	appliedEverywhere(t, c, "claim", res.Index)
	before := ld.log.nudgeCount()
	res = c.propose(RenewEntry{Holder: "n0", Epoch: 1, PrevRev: res.Lease.Rev, TS: 2000})
	if !res.Accepted {
		t.Fatalf("renew: %+v", res)
	}
	if got := ld.log.nudgeCount(); got != before {
		t.Fatalf("a renewal was nudged (%d barriers, want %d)", got, before)
	}
	res = c.propose(ReleaseEntry{Holder: "n0", Epoch: 1, PrevRev: res.Lease.Rev})
	if !res.Accepted {
		t.Fatalf("release: %+v", res)
	}
	appliedEverywhere(t, c, "release", res.Index)
	// The nudge is counted when it is requested; its barrier reaches the log a moment
	// later (on a loaded machine, after this line: wait for it, do not race it).
	waitFor(t, "a barrier after the release", func() bool {
		return ld.log.nudgeCount() > before && ld.log.raft.LastIndex() > res.Index
	})
}

func slowCommitTimeout(cfg *Config) {
	cfg.Raft = func(rc *raft.Config) {
		fastRaft(rc)
		rc.CommitTimeout = 10 * time.Second // without a nudge followers would wait this long
	}
}

// appliedEverywhere waits up to 3 s (well under slowCommitTimeout's 10 s) for every
// node to apply index.
func appliedEverywhere(t *testing.T, c *testCluster, what string, index uint64) {
	t.Helper()
	waitWithin(t, 3*time.Second, fmt.Sprintf("%s at index %d applied on every node", what, index), func() bool {
		for _, nd := range c.nodes {
			if nd.log.View().AppliedIndex < index {
				return false
			}
		}
		return true
	})
}

// A device restarted more often than Raft's snapshot interval still compacts its log:
// Open snapshots once the local log is applied if the threshold is reached.
func TestSnapshotAfterStart(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.SnapshotThreshold = 16 })
	for i := range 40 {
		c.propose(one(put(fmt.Sprintf("s%d", i), fmt.Sprintf("c/%d", i), "v")))
	}
	nd := c.nodes[0]
	if metas, _ := nd.log.snaps.List(); len(metas) != 0 {
		t.Fatalf("a snapshot before the restart (interval 1h): %v", metas)
	}
	c.stop(0)
	c.start(0)
	waitFor(t, "a snapshot after the restart", func() bool {
		metas, err := nd.log.snaps.List()
		return err == nil && len(metas) == 1 && metas[0].Index >= 40
	})
}
