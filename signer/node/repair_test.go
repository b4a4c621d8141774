package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
)

// threeNodes starts n0 (bootstrap), n1 and n2 (joined) over loopback libp2p and waits
// until n0 holds the lease. The configs are returned without Join, for restarts.
func threeNodes(t *testing.T, seed byte) ([]Config, []*Node, chain.Key) {
	t.Helper()
	psk, key, root := testutil.PSK(t), testutil.Key(t, seed), t.TempDir()
	cfgs := make([]Config, 3)
	nodes := make([]*Node, 3)
	for i := range cfgs {
		cfgs[i] = nodeConfig(t, filepath.Join(root, fmt.Sprint(i)), psk, key)
		// Restarts keep their ports, as a device does: the others know them.
		cfgs[i].ListenAddrs = []string{testutil.StableListenAddr(t)}
	}
	cfgs[0].Bootstrap = true
	nodes[0] = startNode(t, cfgs[0])
	testutil.WaitFor(t, 10*time.Second, "the first node holds", nodes[0].Holds)
	token := []byte("repair-join-token")
	nodes[0].AllowJoins(token, time.Now().Add(time.Minute), 2)
	for i := 1; i < 3; i++ {
		cfgs[i].Join = &JoinConfig{Seeds: nodes[0].Addrs(), Token: token}
		nodes[i] = startNode(t, cfgs[i])
		cfgs[i].Join = nil
	}
	return cfgs, nodes, key
}

// commitHashAt is the hex hash of commit seq on n ("" when n has not applied it).
func commitHashAt(n *Node, seq uint64) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for c := range n.Commits(ctx, seq, false) {
		if c.Err != nil || c.Seq != seq {
			return ""
		}
		h := sha256.Sum256(c.Raw)
		return hex.EncodeToString(h[:])
	}
	return ""
}

// lostLogScenario is issue 20 item 2: seq 2 is acknowledged on n1 and n2 (n0 is
// down); n2 then loses its Raft log (lose: a repair, or a restore of an older copy);
// n1 dies; n0 and n2 come up. n2 must not help n0, whose log lacks seq 2, to a
// quorum: no other seq 2 may be committed. Once n1 is back, every replica holds
// the acknowledged seq 2 and one chain. (The roles are chosen so that every device
// knows the addresses of the others: n1 and n2 joined through n0.)
func lostLogScenario(t *testing.T, seed byte, before func(cfgs []Config, nodes []*Node), lose func(dir string)) {
	const lost, dies, stale = 2, 1, 0
	cfgs, nodes, key := threeNodes(t, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := nodes[0].Submit(ctx, testutil.Put("a-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		testutil.WaitFor(t, 10*time.Second, "seq 1 everywhere", func() bool { return n.State().Head.Seq >= 1 })
	}
	if before != nil {
		before(cfgs, nodes)
	}
	if err := nodes[stale].Kill(); err != nil {
		t.Fatal(err)
	}
	nodes[stale] = nil
	testutil.WaitFor(t, 20*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
	res, err := holderOf(nodes...).Submit(ctx, testutil.Put("a-2"), WaitSigned)
	if err != nil {
		t.Fatal(err)
	}
	if res.Seq != 2 {
		t.Fatalf("a-2 signed as seq %d", res.Seq)
	}
	acked := res.Hash
	testutil.WaitFor(t, 10*time.Second, "seq 2 applied where it is lost next", func() bool { return nodes[lost].State().Head.Seq >= 2 })
	if err := nodes[lost].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	lose(cfgs[lost].DataDir)
	if err := nodes[dies].Kill(); err != nil {
		t.Fatal(err)
	}
	nodes[dies] = nil
	nodes[lost] = startNode(t, cfgs[lost])
	nodes[stale] = startNode(t, cfgs[stale])

	// The stale device lacks seq 2. Whatever the two do now, no other seq 2 may commit.
	tctx, tcancel := context.WithTimeout(ctx, 8*time.Second)
	_, err = nodes[stale].Submit(tctx, testutil.Put("b-2"), WaitSigned)
	tcancel()
	t.Logf("a submit without the device that holds seq 2: %v", err)
	for _, i := range []int{lost, stale} {
		if nodes[i].State().Head.Seq >= 2 {
			if got := commitHashAt(nodes[i], 2); got != acked {
				t.Fatalf("fork: n%d applied seq 2 = %.16s, but seq 2 = %.16s was acknowledged", i, got, acked)
			}
		}
	}
	// n1 returns: the cluster goes on from the acknowledged seq 2, on every replica.
	nodes[dies] = startNode(t, cfgs[dies])
	testutil.WaitFor(t, 30*time.Second, "a holder again", func() bool { return holderOf(nodes...) != nil })
	res3, err := holderOf(nodes...).Submit(ctx, testutil.Put("c-3"), WaitSigned)
	if err != nil {
		t.Fatal(err)
	}
	var first [][]byte
	for i, n := range nodes {
		testutil.WaitFor(t, 30*time.Second, "every replica at the head", func() bool { return n.State().Head.Seq >= res3.Seq })
		if got := commitHashAt(n, 2); got != acked {
			t.Fatalf("n%d: seq 2 = %.16s, acknowledged %.16s", i, got, acked)
		}
		c := chainOfNode(t, n)
		if err := chain.VerifyChain(c, key.DID()); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = c
		} else if fmt.Sprint(c) != fmt.Sprint(first) {
			t.Fatalf("n%d holds another chain", i)
		}
	}
	// The device that lost its log votes again once it has caught up.
	testutil.WaitFor(t, 30*time.Second, "the device that lost its log caught up and votes again", func() bool {
		return nodes[lost].State().Rejoin == nil
	})
}

// Issue 20 item 2: `baton repair` drops a voter's log but keeps its term and vote. The
// repaired device must not vote until it has caught up.
func TestRepairedVoterDoesNotElectAStaleLeader(t *testing.T) {
	lostLogScenario(t, 31, nil, func(dir string) {
		if err := intentlog.Repair(dir); err != nil {
			t.Fatal(err)
		}
	})
}

// Issue 20 item 2, a restored backup: n2's data dir is copied while it is stopped
// after seq 1 and put back after seq 2 was acknowledged on it. The copy does not know
// seq 2 (nor the terms and votes after it); it must not vote until it has caught up.
func TestRestoredOldCopyDoesNotElectAStaleLeader(t *testing.T) {
	var backup string
	lostLogScenario(t, 32, func(cfgs []Config, nodes []*Node) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := nodes[2].Stop(ctx); err != nil {
			t.Fatal(err)
		}
		backup = filepath.Join(t.TempDir(), "backup")
		copyTree(t, cfgs[2].DataDir, backup)
		nodes[2] = startNode(t, cfgs[2])
		testutil.WaitFor(t, 20*time.Second, "n2 back", func() bool { return nodes[2].State().Raft.Leader != "" })
	}, func(dir string) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		copyTree(t, backup, dir)
	})
}

// copyTree copies a data dir (testutil.CopyTree).
func copyTree(t *testing.T, from, to string) { testutil.CopyTree(t, from, to) }

// Issue 20 item 3: `baton repair` on the founding device (Bootstrap) left a device
// that refused to start ("the chain key already has a history"). Repaired, it
// re-syncs from the others like any member; repaired everywhere, every device waits
// (none bootstraps a second history) and says why.
func TestRepairOfTheFounderAndEverywhere(t *testing.T) {
	cfgs, nodes, key := threeNodes(t, 33)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := nodes[0].Submit(ctx, testutil.Put("f-1"), WaitSigned)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		testutil.WaitFor(t, 10*time.Second, "seq 1 everywhere", func() bool { return n.State().Head.Seq >= res.Seq })
	}
	if err := nodes[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := intentlog.Repair(cfgs[0].DataDir); err != nil {
		t.Fatal(err)
	}
	n0, err := Start(ctx, cfgs[0]) // cfgs[0].Bootstrap: the founder
	if err != nil {
		t.Fatalf("the repaired founder does not start: %v", err)
	}
	t.Cleanup(func() { _ = n0.Kill() })
	nodes[0] = n0
	testutil.WaitFor(t, 30*time.Second, "the founder re-synced and votes again", func() bool {
		st := n0.State()
		return st.Head.Seq >= res.Seq && st.Rejoin == nil
	})
	if fmt.Sprint(chainOfNode(t, n0)) != fmt.Sprint(chainOfNode(t, nodes[1])) {
		t.Fatal("the repaired founder holds another chain")
	}
	if err := chain.VerifyChain(chainOfNode(t, n0), key.DID()); err != nil {
		t.Fatal(err)
	}

	// Repair on every device: nobody holds the history any more. No device may
	// bootstrap a new one; each waits and says so.
	for i, n := range nodes {
		if err := n.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := intentlog.Repair(cfgs[i].DataDir); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nodes {
		nodes[i] = startNode(t, cfgs[i])
	}
	for i, n := range nodes {
		st := n.State()
		if st.Rejoin == nil || st.Head.Seq != 0 || st.Raft.LastIndex != 0 {
			t.Fatalf("n%d after a repair everywhere: rejoin %+v, head %d, last index %d", i, st.Rejoin, st.Head.Seq, st.Raft.LastIndex)
		}
	}
	tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
	defer tcancel()
	if _, err := nodes[0].Submit(tctx, testutil.Put("f-2"), WaitSigned); err == nil {
		t.Fatal("a cluster whose every member lost its log signed a new history")
	}
}
