package signer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/transport"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/pnet"
)

const (
	nodeTTL  = time.Second
	nodeTick = 100 * time.Millisecond
)

// nodeRaft shortens raft's timeouts for libp2p on loopback.
func nodeRaft(rc *raft.Config) {
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 100 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
}

func nodeLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("BATON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testPSK(t testing.TB) pnet.PSK {
	psk, err := transport.GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	return psk
}

// nodeConfig is a loopback test config for dir.
func nodeConfig(t testing.TB, dir string, psk pnet.PSK, key Key) Config {
	return Config{DataDir: dir, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PSK: psk, ChainKey: key,
		TTL: nodeTTL, Tick: nodeTick, Logger: nodeLogger(t), Raft: nodeRaft}
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
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline, not synchronisation
	}
}

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
		c, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range c.Ops {
			ids = append(ids, op.ID)
		}
	}
	return ids
}

func putIntent(id string) intentlog.Intent {
	return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.test/" + id, Value: []byte("v-" + id)}
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}
