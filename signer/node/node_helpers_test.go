package node

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
)

const (
	nodeTTL  = time.Second
	nodeTick = 100 * time.Millisecond
)

// nodeConfig is a loopback test config for dir.
func nodeConfig(t testing.TB, dir string, psk pnet.PSK, key chain.Key) Config {
	return Config{DataDir: dir, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PSK: psk, ChainKey: key,
		TTL: nodeTTL, Tick: nodeTick, Logger: testutil.Logger(t), Raft: testutil.FastRaft}
}

func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.DataDir, err)
	}
	t.Cleanup(func() { _ = n.Kill() })
	return n
}

// waitUntil polls cond every 10 ms until it holds or d passes.
// holderOf returns the node that holds the lease and may sign, or nil.
func holderOf(nodes ...*Node) *Node {
	for _, n := range nodes {
		if n != nil && n.Holds() {
			return n
		}
	}
	return nil
}

// chainOfNode reads a node's whole applied chain through Commits.
func chainOfNode(t testing.TB, n *Node) [][]byte {
	t.Helper()
	var raws [][]byte
	for c := range n.Commits(context.Background(), 1, false) {
		if c.Err != nil {
			t.Fatal(c.Err)
		}
		raws = append(raws, c.Raw)
	}
	return raws
}

// opIDs returns the intent IDs of a chain, in order.
func opIDs(t testing.TB, raws [][]byte) []string {
	t.Helper()
	var ids []string
	for _, raw := range raws {
		c, err := chain.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range c.Ops {
			ids = append(ids, op.ID)
		}
	}
	return ids
}

// joinTwo starts devices "b" and "c" under root joining founder (which leads) and
// waits until all three see three members; it returns the three, founder first.
func joinTwo(t testing.TB, root string, psk pnet.PSK, key chain.Key, founder *Node) []*Node {
	t.Helper()
	token := []byte("join-token-0123456789")
	founder.AllowJoins(token, time.Now().Add(time.Minute), 2)
	nodes := []*Node{founder}
	for _, name := range []string{"b", "c"} {
		cfg := nodeConfig(t, filepath.Join(root, name), psk, key)
		cfg.Join = &JoinConfig{Seeds: founder.Addrs(), Token: token}
		nodes = append(nodes, startNode(t, cfg))
	}
	testutil.WaitFor(t, 10*time.Second, "three members everywhere", func() bool {
		for _, n := range nodes {
			if n.State().Members != 3 {
				return false
			}
		}
		return true
	})
	return nodes
}
