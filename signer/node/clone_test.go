package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// A restart changes a device's incarnation once; the old one falls silent but for
// calls it had in flight. Two live processes keep calling: the later-started is named
// the clone, and only its calls are answered so.
func TestCloneTrackerTellsRestartFromClone(t *testing.T) {
	now := time.Unix(1000, 0)
	tick := func() time.Time { now = now.Add(PeerMemoryEvery); return now }
	a := incarnation{ID: 1, Start: 100}
	b := incarnation{ID: 2, Start: 200}

	restart := newCloneTracker()
	for i := uint64(1); i <= 5; i++ {
		restart.seen("p", a, i, tick())
	}
	for i := uint64(1); i <= 10; i++ {
		if msg := restart.seen("p", b, i, tick()); msg != "" {
			t.Fatalf("a restart taken for a clone: %s", msg)
		}
		if i <= cloneCalls-1 { // the old process's calls in flight, arriving late
			if msg := restart.seen("p", a, 5+i, now); msg != "" {
				t.Fatalf("a late call of the old process taken for a clone: %s", msg)
			}
		}
	}
	if _, ok := restart.cloneOf("p"); ok {
		t.Fatal("a restart named a clone")
	}

	clone := newCloneTracker()
	var told []incarnation
	for i := uint64(1); i <= 10; i++ {
		for _, inc := range []incarnation{a, b} {
			if inc == b && i == 1 {
				continue // the clone starts a round later
			}
			if msg := clone.seen("p", inc, i, tick()); msg != "" {
				told = append(told, inc)
				if !strings.Contains(msg, "another process runs with this device's identity") {
					t.Fatalf("clone message: %s", msg)
				}
			}
		}
	}
	if c, ok := clone.cloneOf("p"); !ok || c != b {
		t.Fatalf("clone named %+v %v, want the later start %+v", c, ok, b)
	}
	for _, inc := range told {
		if inc != b {
			t.Fatalf("the earlier process (%+v) was told it is the clone", inc)
		}
	}
	if len(told) == 0 {
		t.Fatal("the clone was never told")
	}
}

// Issue 38 item 4: a stopped device's data dir (and mark) copied and started beside
// the original with the same identity. On d880b4d both ran, the original fell behind
// while the clone answered for its identity, and no device noticed. The members
// detect the second process; the later one stops (Cloned), signs nothing, and every
// replica keeps one chain.
func TestCloneBesideItsOriginalStops(t *testing.T) {
	cfgs, nodes, _ := threeNodes(t, 41)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := nodes[2].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cloneCfg := cfgs[2]
	cloneCfg.DataDir = filepath.Join(t.TempDir(), "clone")
	cloneCfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	copyTree(t, cfgs[2].DataDir, cloneCfg.DataDir)
	mark, err := os.ReadFile(cfgs[2].DataDir + MarkSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cloneCfg.DataDir+MarkSuffix, mark, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes[2] = startNode(t, cfgs[2])
	testutil.WaitFor(t, 10*time.Second, "the original back", func() bool { return nodes[2].State().Raft.Leader != "" })
	clone := startNode(t, cloneCfg)
	for i := range 5 {
		testutil.WaitFor(t, 20*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
		if _, err := holderOf(nodes...).Submit(ctx, testutil.Put(string(rune('a'+i))), WaitSigned); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-clone.Cloned():
	case <-time.After(30 * time.Second):
		t.Fatalf("the clone was not detected; its state: %+v", clone.State())
	}
	if st := clone.State(); st.Healthy || st.ProblemKind != "clone" {
		t.Fatalf("the clone reports healthy=%v kind=%q", st.Healthy, st.ProblemKind)
	}
	select {
	case <-nodes[2].Cloned():
		t.Fatal("the original was told it is the clone")
	default:
	}
	if clone.Holds() {
		t.Fatal("the clone holds the lease")
	}
	testutil.WaitFor(t, 20*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
	want := chainOfNode(t, holderOf(nodes...))
	for _, n := range nodes {
		testutil.WaitFor(t, 10*time.Second, "one chain everywhere", func() bool { return len(chainOfNode(t, n)) == len(want) })
		got := chainOfNode(t, n)
		for i := range want {
			if string(got[i]) != string(want[i]) {
				t.Fatalf("%s's commit %d differs", n.ID(), i+1)
			}
		}
	}
}

// Peer memory keeps the highest of what each member reported, survives a restart
// (its file), forgets devices that are no longer voters, and sets a corrupt file
// aside instead of refusing to start.
func TestPeerMemoryKeepsTheHighestAndForgetsNonVoters(t *testing.T) {
	dir := t.TempDir()
	p, err := loadPeerMemory(dir)
	if err != nil {
		t.Fatal(err)
	}
	p.note("a", memo{Committed: 10, Term: 3})
	p.note("a", memo{Committed: 7, Term: 4}) // a later report of a lower index: kept at 10
	p.note("b", memo{Committed: 5, Term: 2})
	if err := p.save(); err != nil {
		t.Fatal(err)
	}
	q, err := loadPeerMemory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m := q.of("a"); m.Committed != 10 || m.Term != 4 {
		t.Fatalf("a: %+v, want committed 10 term 4", m)
	}
	q.keepOnly([]string{"a"})
	if m := q.of("b"); m != (memo{}) {
		t.Fatalf("b is no longer a voter but is remembered: %+v", m)
	}
	if err := os.WriteFile(filepath.Join(dir, PeerMemoryFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := loadPeerMemory(dir)
	if err == nil || r == nil || r.of("a") != (memo{}) {
		t.Fatalf("a corrupt file: %v, %+v", err, r)
	}
	if _, err := os.Stat(filepath.Join(dir, PeerMemoryFile+".corrupt")); err != nil {
		t.Fatalf("the corrupt file was not set aside: %v", err)
	}
}
