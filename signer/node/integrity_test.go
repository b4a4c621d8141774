package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
)

func TestDigestVerdict(t *testing.T) {
	const a, b, c = "aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccc"
	cases := []struct {
		name   string
		mine   map[uint64]string
		theirs map[string]map[uint64]string
		alarm  bool
		warn   bool
	}{
		{"all agree", map[uint64]string{1024: a}, map[string]map[uint64]string{"p1": {1024: a}, "p2": {1024: a}}, false, false},
		{"the others agree against me", map[uint64]string{1024: a}, map[string]map[uint64]string{"p1": {1024: b}, "p2": {1024: b}}, true, false},
		{"one other differs", map[uint64]string{1024: a}, map[string]map[uint64]string{"p1": {1024: a}, "p2": {1024: b}}, false, true},
		{"all three differ", map[uint64]string{1024: a}, map[string]map[uint64]string{"p1": {1024: b}, "p2": {1024: c}}, true, false},
		{"two replicas, a tie", map[uint64]string{1024: a}, map[string]map[uint64]string{"p1": {1024: b}}, true, false},
		{"no common checkpoint", map[uint64]string{1024: a}, map[string]map[uint64]string{"p1": {2048: b}}, false, false},
		{"the latest common index decides", map[uint64]string{1024: a, 2048: a},
			map[string]map[uint64]string{"p1": {1024: a, 2048: b}, "p2": {1024: a, 2048: b}}, true, false},
		{"older disagreement, latest agree", map[uint64]string{1024: a, 2048: a},
			map[string]map[uint64]string{"p1": {1024: b, 2048: a}, "p2": {2048: a}}, false, false},
	}
	for _, tc := range cases {
		v := digestVerdict(tc.mine, tc.theirs)
		if v.alarm != tc.alarm || (v.msg != "" && !v.alarm) != tc.warn {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

// The flipped-bit replay (issue 14): a bit flips inside a log entry of a stopped
// replica's raft.db and its state.db is gone, so a restart would replay the corrupt
// entry. It must end in a clear refusal and a re-sync (baton repair: intentlog.Repair),
// never in a replica that applies something else and signs its own fork.
func TestFlippedBitInRaftLogEndsInResyncNotFork(t *testing.T) {
	psk, key, root := testutil.PSK(t), testutil.Key(t, 21), t.TempDir()
	cfgs := make([]Config, 3)
	nodes := make([]*Node, 3)
	for i := range cfgs {
		cfgs[i] = nodeConfig(t, filepath.Join(root, fmt.Sprint(i)), psk, key)
	}
	cfgs[0].Bootstrap = true
	nodes[0] = startNode(t, cfgs[0])
	testutil.WaitFor(t, 10*time.Second, "the first node holds", nodes[0].Holds)
	token := []byte("integrity-join-token")
	nodes[0].AllowJoins(token, time.Now().Add(time.Minute), 2)
	for i := 1; i < 3; i++ {
		cfgs[i].Join = &JoinConfig{Seeds: nodes[0].Addrs(), Token: token}
		nodes[i] = startNode(t, cfgs[i])
		cfgs[i].Join = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const marker = "FLIP-ME-0123456789-FLIP-ME-0123456789"
	in := testutil.Put("marked")
	in.Value = []byte(marker)
	if _, err := nodes[0].Submit(ctx, in, WaitSigned); err != nil {
		t.Fatal(err)
	}
	head := nodes[0].State().Head.Seq
	x := 2
	testutil.WaitFor(t, 10*time.Second, "the replica caught up", func() bool { return nodes[x].State().Head.Seq >= head })
	if err := nodes[x].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dir := cfgs[x].DataDir
	raw, err := os.ReadFile(filepath.Join(dir, intentlog.RaftFile))
	if err != nil {
		t.Fatal(err)
	}
	flipped := 0
	for i := bytes.Index(raw, []byte(marker)); i >= 0; {
		raw[i+len(marker)/2] ^= 0x01
		flipped++
		j := bytes.Index(raw[i+1:], []byte(marker))
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if flipped == 0 {
		t.Fatal("the marked entry is not in raft.db")
	}
	if err := os.WriteFile(filepath.Join(dir, intentlog.RaftFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{intentlog.StateFile, intentlog.CleanFile} {
		_ = os.Remove(filepath.Join(dir, f))
	}

	// The restart refuses, naming the file.
	_, err = Start(ctx, cfgs[x])
	if !errors.Is(err, intentlog.ErrCorrupt) || !strings.Contains(err.Error(), intentlog.RaftFile) {
		t.Fatalf("restart on a corrupt raft.db: %v", err)
	}
	// baton repair keeps Raft's term and vote and drops the log and state; the
	// replica then re-syncs from the others.
	if err := intentlog.Repair(dir); err != nil {
		t.Fatal(err)
	}
	nodes[x] = startNode(t, cfgs[x])
	testutil.WaitFor(t, 20*time.Second, "the repaired replica re-synced", func() bool {
		return nodes[x].State().Head.Seq >= head && nodes[x].Health() == nil
	})
	// Hand it the lease: it signs on the cluster's head, not a fork of its own.
	h := holderOf(nodes...)
	if h == nil {
		t.Fatal("no holder")
	}
	if h != nodes[x] {
		if err := h.Transfer(ctx, nodes[x].ID()); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the repaired replica holds", nodes[x].Holds)
	if _, err := nodes[x].Submit(ctx, testutil.Put("after-repair"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	want := nodes[x].State().Head.Seq
	var chains [][][]byte
	for _, n := range nodes {
		testutil.WaitFor(t, 10*time.Second, "every replica at the head", func() bool { return n.State().Head.Seq >= want })
		c := chainOfNode(t, n)
		if err := chain.VerifyChain(c, key.DID()); err != nil {
			t.Fatal(err)
		}
		chains = append(chains, c)
	}
	for i := 1; i < len(chains); i++ {
		if fmt.Sprint(chains[i]) != fmt.Sprint(chains[0]) {
			t.Fatalf("replica %d holds another chain", i)
		}
	}
	if st := nodes[x].State(); st.Loop.SignedRefused != 0 || !st.Healthy {
		t.Fatalf("repaired replica: %+v", st)
	}
}
