package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
)

// A device holding another chain's key is refused, whether it joins or restarts on a
// data dir of this chain, and the cluster it tried is left as it was.
func TestNodeRefusesAnotherChainsKey(t *testing.T) {
	psk, key, other := testutil.PSK(t), testutil.Key(t, 11), testutil.Key(t, 12)
	cfg := nodeConfig(t, t.TempDir(), psk, key)
	cfg.Bootstrap = true
	first := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := first.Submit(ctx, testutil.Put("g-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	g, ok := first.Log().Genesis()
	if !ok || g.Chain != key.DID() {
		t.Fatalf("genesis %+v %v", g, ok)
	}
	before := first.State()

	token := []byte("identity-join-token")
	first.AllowJoin(token, time.Now().Add(time.Minute))
	jcfg := nodeConfig(t, t.TempDir(), psk, other)
	jcfg.Join = &JoinConfig{Seeds: first.Addrs(), Token: token}
	_, err := Start(ctx, jcfg)
	var ie *IdentityError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIdentity) {
		t.Fatalf("join with another chain's key: %v", err)
	}
	for _, did := range []string{key.DID(), other.DID()} {
		if !strings.Contains(err.Error(), did) {
			t.Fatalf("the error does not name %s: %v", did, err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the refused device gone from the members", func() bool { return first.State().Members == 1 })
	if _, err := first.Submit(ctx, testutil.Put("g-2"), WaitSigned); err != nil {
		t.Fatalf("the cluster after the refused join: %v", err)
	}
	if after := first.State(); after.Head.Seq != before.Head.Seq+1 || after.Loop.SignedRefused != 0 {
		t.Fatalf("state after the refused join: %+v", after)
	}

	// The first device's own data dir, restarted with the other key: refused.
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rcfg := cfg
	rcfg.Bootstrap, rcfg.ChainKey, rcfg.Chain, rcfg.GenesisFile = false, other, "", "-"
	if _, err := Start(ctx, rcfg); !errors.Is(err, ErrIdentity) {
		t.Fatalf("restart with another chain's key: %v", err)
	}
}

// A chain key remembers its history: bootstrapping a new cluster with it (its Raft
// state lost) is refused unless the operator asks for a second history.
func TestNodeRefusesSecondHistory(t *testing.T) {
	dir := t.TempDir()
	cfg := nodeConfig(t, dir, testutil.PSK(t), testutil.Key(t, 13))
	cfg.Bootstrap = true
	n := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.Submit(ctx, testutil.Put("h-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the genesis remembered", func() bool {
		_, err := os.Stat(filepath.Join(dir, GenesisFileName))
		return err == nil
	})
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{intentlog.RaftFile, intentlog.StateFile, intentlog.CleanFile, "snapshots"} {
		if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Start(ctx, cfg); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "second history") {
		t.Fatalf("bootstrap of a key with a history: %v", err)
	}
	cfg.NewHistory = true
	n2 := startNode(t, cfg)
	if _, err := n2.Submit(ctx, testutil.Put("h-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	if err := chain.VerifyChain(chainOfNode(t, n2), n2.Chain()); err != nil {
		t.Fatal(err)
	}
}
