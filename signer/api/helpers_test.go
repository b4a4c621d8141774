package api

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

// nodeConfig is a loopback single-device test config in dir.
func nodeConfig(t testing.TB, dir string, psk pnet.PSK, key chain.Key) node.Config {
	return node.Config{DataDir: dir, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PSK: psk, ChainKey: key,
		TTL: time.Second, Tick: 100 * time.Millisecond, Logger: testutil.Logger(t), Raft: testutil.FastRaft}
}

// served is a running node and its API on <data>/baton.sock.
type served struct {
	*node.Node
	srv *Server
}

func (s *served) APISocket() string { return s.srv.Socket() }

// startServed starts a node with cfg and its API (socket in the data dir, plus acfg's
// other settings); both stop at the test's end.
func startServed(t testing.TB, cfg node.Config, acfg Config) *served {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.DataDir, err)
	}
	t.Cleanup(func() { _ = n.Kill() })
	if acfg.Socket == "" {
		acfg.Socket = filepath.Join(cfg.DataDir, SocketFile)
	}
	acfg.Logger = cfg.Logger
	srv, err := Start(n, acfg)
	if err != nil {
		t.Fatalf("api: %v", err)
	}
	t.Cleanup(func() { srv.Close(nil) })
	return &served{Node: n, srv: srv}
}

// startAtprotoHolder starts one bootstrapped node of a new atproto chain (a P-256
// key) served with acfg, and waits until it holds the lease.
func startAtprotoHolder(t *testing.T, acfg Config) (*served, *atproto.Key) {
	t.Helper()
	key, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), key)
	cfg.Bootstrap = true
	n := startServed(t, cfg, acfg)
	testutil.WaitFor(t, 10*time.Second, "holds", n.Holds)
	return n, key
}
