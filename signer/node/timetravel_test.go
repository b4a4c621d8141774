package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
)

// Issue 38 item 1: the founder's backup from before the others joined, restored in
// place (the mark beside the data dir survives) while the others are up. Its Raft
// configuration names only itself: hashicorp/raft elects it with no message sent, so
// the fence's filter never saw that election, and the restored device signed a second
// seq 2 within seconds. A fenced device must neither lead, claim nor sign, whatever
// its configuration says; the acknowledged seq 2 stays the only one.
func TestRestoredFounderBackupNeverLeadsAlone(t *testing.T) {
	restored, nodes, acked := restoredFounder(t, 38, func(dir, backup string) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		copyTree(t, backup, dir)
	})
	if restored.State().Rejoin == nil {
		t.Fatal("the restored founder is not fenced")
	}
	// It is asked to sign, as a user would, and watched for longer than it took on
	// the old code (within 8 s): three TTLs, and its Raft election timeouts many times.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		sctx, scancel := context.WithTimeout(ctx, 6*nodeTTL)
		defer scancel()
		_, _ = restored.Submit(sctx, testutil.Put("restored-2"), WaitSigned)
	}()
	deadline := time.Now().Add(6 * nodeTTL)
	for time.Now().Before(deadline) {
		st := restored.State()
		fenced := st.Rejoin != nil
		if fenced && restored.log.Raft().State() == raft.Leader {
			t.Fatal("the fenced founder leads Raft")
		}
		if fenced && restored.Holds() {
			t.Fatal("the fenced founder holds the lease")
		}
		if fenced && (st.Healthy || !strings.Contains(st.Problem, "catching up")) {
			t.Fatalf("the fenced founder reports healthy=%v problem=%q, want a catching-up problem", st.Healthy, st.Problem)
		}
		for _, n := range []*Node{restored, nodes[1], nodes[2]} {
			if h := commitHashAt(n, 2); h != "" && h != acked {
				t.Fatalf("%s applied a second seq 2: %s, acknowledged %s", n.ID(), h, acked)
			}
		}
		time.Sleep(20 * time.Millisecond) // a poll of state, not a synchronisation
	}
	// One history: the restored device catches up with the others' and votes again.
	testutil.WaitFor(t, 30*time.Second, "the restored founder caught up", func() bool {
		return restored.State().Rejoin == nil && commitHashAt(restored, 2) == acked
	})
}

// Issue 38 item 3: what cannot be prevented is loud. n1 is copied whole (its data dir
// and its mark: a whole-disk backup) while n2 is down, so nothing remembers what the
// copy forgets; seq 2 is acknowledged by n0 and n1; n0 and n1 stop; n1 is restored
// whole and starts with n2, and they sign another seq 2. When n0 returns, Raft asks
// it to replace its applied seq 2 with theirs. On d880b4d it kept its own seq 2
// beside theirs and nothing said so; it must keep its history and halt with an
// alarm that names the seq signed twice.
func TestWholeRestoreForkIsLoud(t *testing.T) {
	cfgs, nodes, _ := threeNodes(t, 39)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := nodes[0].Submit(ctx, testutil.Put("one"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "seq 1 everywhere", func() bool {
		return commitHashAt(nodes[1], 1) != "" && commitHashAt(nodes[2], 1) != ""
	})
	if err := nodes[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	copyTree(t, cfgs[1].DataDir, backup)
	mark, err := os.ReadFile(cfgs[1].DataDir + MarkSuffix)
	if err != nil {
		t.Fatal(err)
	}
	nodes[1] = startNode(t, cfgs[1])
	if err := nodes[2].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := holderOf(nodes...).Submit(ctx, testutil.Put("two"), WaitSigned)
	if err != nil || res.Seq != 2 {
		t.Fatalf("seq 2 with n2 down: %+v %v", res, err)
	}
	testutil.WaitFor(t, 10*time.Second, "seq 2 on n1", func() bool { return commitHashAt(nodes[1], 2) == res.Hash })
	for _, i := range []int{0, 1} {
		if err := nodes[i].Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(cfgs[1].DataDir); err != nil {
		t.Fatal(err)
	}
	copyTree(t, backup, cfgs[1].DataDir)
	if err := os.WriteFile(cfgs[1].DataDir+MarkSuffix, mark, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes[1], nodes[2] = startNode(t, cfgs[1]), startNode(t, cfgs[2])
	other, err := func() (SubmitResult, error) {
		for {
			h := holderOf(nodes[1], nodes[2])
			if h == nil {
				if ctx.Err() != nil {
					return SubmitResult{}, ctx.Err()
				}
				time.Sleep(20 * time.Millisecond) // a poll for a holder
				continue
			}
			return h.Submit(ctx, testutil.Put("other-two"), WaitSigned)
		}
	}()
	if err != nil || other.Seq != 2 || other.Hash == res.Hash {
		t.Skipf("the stale pair did not sign another seq 2 (%+v, %v): the scenario did not fork", other, err)
	}
	nodes[0] = startNode(t, cfgs[0])
	defer func() {
		st := nodes[0].State()
		t.Logf("n0 at the end: %+v %+v rejoin=%+v problem=%s", st.Raft, st.Lease, st.Rejoin, st.Problem)
	}()
	testutil.WaitFor(t, 30*time.Second, "n0's alarm", func() bool {
		return nodes[0].State().ProblemKind == "diverged"
	})
	st := nodes[0].State()
	t.Logf("n0: %s", st.Problem)
	if !strings.Contains(st.Problem, "seqs 2") && !strings.Contains(st.Problem, "seq 2") {
		t.Fatalf("the alarm does not name seq 2: %s", st.Problem)
	}
	if h := commitHashAt(nodes[0], 2); h != res.Hash {
		t.Fatalf("n0's applied seq 2 is %q now, want its own %s kept", h, res.Hash)
	}
}

// Issue 38 item 2: a whole restore (the data dir and its mark put back together, as
// a whole-disk or whole-home restore does) leaves the device nothing of its own to
// recognise it by; on d880b4d it voted at once. Its peers remember what it stored: it
// starts fenced and catches up.
func TestWholeRestoreRecognisedByPeers(t *testing.T) {
	cfgs, nodes, _ := threeNodes(t, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := nodes[0].Submit(ctx, testutil.Put("one"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "seq 1 on n1", func() bool { return commitHashAt(nodes[1], 1) != "" })
	if err := nodes[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	copyTree(t, cfgs[1].DataDir, backup)
	mark, err := os.ReadFile(cfgs[1].DataDir + MarkSuffix)
	if err != nil {
		t.Fatal(err)
	}
	nodes[1] = startNode(t, cfgs[1])
	res, err := holderOf(nodes...).Submit(ctx, testutil.Put("two"), WaitSigned)
	if err != nil {
		t.Fatal(err)
	}
	// The others have heard how far n1 stored (they ask once a PeerMemoryEvery).
	testutil.WaitFor(t, 10*time.Second, "n1's progress remembered", func() bool {
		return commitHashAt(nodes[1], res.Seq) == res.Hash && nodes[0].memory.of(nodes[1].ID()).Committed >= nodes[1].knownCommitted()
	})
	if err := nodes[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cfgs[1].DataDir); err != nil {
		t.Fatal(err)
	}
	copyTree(t, backup, cfgs[1].DataDir)
	if err := os.WriteFile(cfgs[1].DataDir+MarkSuffix, mark, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes[1] = startNode(t, cfgs[1])
	testutil.WaitFor(t, 30*time.Second, "n1 fenced by what its peers remember", func() bool {
		rj := nodes[1].State().Rejoin
		return rj != nil && strings.Contains(rj.Reason, "remembers this device")
	})
	testutil.WaitFor(t, 30*time.Second, "n1 caught up", func() bool {
		return nodes[1].State().Rejoin == nil && commitHashAt(nodes[1], res.Seq) == res.Hash
	})
}

// restoredFounder: the founder signs seq 1 alone and is copied while stopped (a
// backup from before anyone joined); two devices join and seq 2 is acknowledged on
// all three; the founder stops, restore puts (some of) the backup back, and it starts
// again while the others are up. It returns the restarted founder, the three nodes
// (the founder's old incarnation first) and the acknowledged seq 2's hash.
func restoredFounder(t *testing.T, seed byte, restore func(dir, backup string)) (*Node, []*Node, string) {
	t.Helper()
	psk, key, root := testutil.PSK(t), testutil.Key(t, seed), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg0 := nodeConfig(t, filepath.Join(root, "n0"), psk, key)
	cfg0.Bootstrap = true
	cfg0.ListenAddrs = []string{testutil.StableListenAddr(t)} // restarts keep the port, as a device does
	n0 := startNode(t, cfg0)
	testutil.WaitFor(t, 10*time.Second, "the founder holds", n0.Holds)
	if _, err := n0.Submit(ctx, testutil.Put("alone-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	if err := n0.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	copyTree(t, cfg0.DataDir, backup)

	n0 = startNode(t, cfg0)
	nodes := joinTwo(t, root, psk, key, n0)
	res, err := holderOf(nodes...).Submit(ctx, testutil.Put("three-2"), WaitSigned)
	if err != nil {
		t.Fatal(err)
	}
	if res.Seq != 2 {
		t.Fatalf("the intent after the joins is seq %d, want 2", res.Seq)
	}
	acked := commitHashAt(nodes[0], 2)
	testutil.WaitFor(t, 10*time.Second, "seq 2 on all three, and the founder's progress remembered", func() bool {
		return commitHashAt(nodes[1], 2) == acked && commitHashAt(nodes[2], 2) == acked &&
			nodes[1].memory.of(nodes[0].ID()).Committed >= nodes[0].knownCommitted()
	})
	if err := nodes[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	restore(cfg0.DataDir, backup)
	return startNode(t, cfg0), nodes, acked
}

// Issue 38 item 1, without the mark: the founder's Raft log and state put back to the
// copy from before the others joined, its mark gone (its address book kept). Its
// configuration names it alone, but it knows the others: it asks them what they
// remember of it before it campaigns, is fenced, and catches up.
func TestRestoredFounderLogWithoutMarkAsksItsMembers(t *testing.T) {
	restored, nodes, acked := restoredFounder(t, 42, func(dir, backup string) {
		for _, f := range []string{intentlog.RaftFile, intentlog.StateFile} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(backup, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Remove(dir + MarkSuffix); err != nil {
			t.Fatal(err)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "the founder fenced by what its members remember", func() bool {
		rj := restored.State().Rejoin
		return rj != nil && strings.Contains(rj.Reason, "remembers this device")
	})
	if restored.log.Raft().State() == raft.Leader {
		t.Fatal("the restored founder leads")
	}
	defer func() {
		if t.Failed() {
			st := restored.State()
			t.Logf("restored: rejoin %+v raft %+v floor %d members %d; others: %+v / %+v", st.Rejoin, st.Raft, restored.fence.floor.Load(), st.Members,
				nodes[1].State().Raft, nodes[2].State().Raft)
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "the restored founder caught up", func() bool {
		return restored.State().Rejoin == nil && commitHashAt(restored, 2) == acked
	})
	for _, n := range nodes[1:] {
		if h := commitHashAt(n, 2); h != acked {
			t.Fatalf("%s's seq 2 is %s, want %s", n.ID(), h, acked)
		}
	}
}
