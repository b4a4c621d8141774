package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
)

// startDevice starts the device in dir in-process on loopback (bootstrap: run
// --bootstrap).
func startDevice(t *testing.T, dir string, bootstrap bool) (*node.Node, error) {
	t.Helper()
	d, err := device.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.Config()
	cfg.Bootstrap = cfg.Bootstrap || bootstrap
	cfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.TTL, cfg.Tick = time.Second, 100*time.Millisecond
	cfg.Logger, cfg.Raft = testutil.Logger(t), testutil.FastRaft
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { _ = n.Kill() })
	}
	return n, err
}

// Issue 20 item 4: `init --from DIR` copied the chain key but not chain.genesis, so
// `run --bootstrap` on the copy started a second history of the chain (a second seq
// 1). The history marker travels with the key (a data dir, a backup, an invite), and
// the bootstrap refuses, saying how to join instead.
func TestHistoryTravelsWithTheChainKey(t *testing.T) {
	a := mustInit(t)
	n, err := startDevice(t, a, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Submit(ctx, testutil.Put("a-1"), node.WaitSigned); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a remembers its genesis", func() bool {
		_, err := os.Stat(filepath.Join(a, node.GenesisFileName))
		return err == nil
	})
	inv := makeInvite(t, a, time.Now().Add(time.Hour))
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	invFile := filepath.Join(t.TempDir(), "invite.txt")
	if err := os.WriteFile(invFile, []byte(inv+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from string }{{"a copy of the data dir", a}, {"an invite with the chain key", invFile}} {
		b := filepath.Join(t.TempDir(), "b")
		if code, _, errs := runCLI(t, nil, "", "init", "--data", b, "--from", tc.from); code != 0 {
			t.Fatalf("%s: init: %s", tc.name, errs)
		}
		_, err := startDevice(t, b, true)
		if !errors.Is(err, node.ErrIdentity) {
			t.Fatalf("%s: run --bootstrap with a chain key that has a history: %v", tc.name, err)
		}
		if !strings.Contains(err.Error(), "baton join") || strings.Contains(err.Error(), "--start-second-history") {
			t.Fatalf("%s: the refusal must say how to join, not how to fork: %v", tc.name, err)
		}
	}
}

// Issue 20 item 3: repair refuses on a device that knows no other member (no one
// else holds the history), and leaves its data dir as it was.
func TestRepairRefusesWithoutOtherMembers(t *testing.T) {
	a := mustInit(t)
	n, err := startDevice(t, a, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Submit(ctx, testutil.Put("a-1"), node.WaitSigned); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, nil, "", "repair", "--data", a)
	if code == 0 || !strings.Contains(errs, "no other member") {
		t.Fatalf("repair of a lone device: %d %q", code, errs)
	}
	for _, f := range []string{"raft.db.corrupt", node.RejoinFile} {
		if _, err := os.Stat(filepath.Join(a, f)); err == nil {
			t.Fatalf("the refused repair left %s", f)
		}
	}
}
