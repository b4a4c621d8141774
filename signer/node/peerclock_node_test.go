package node

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// skewedClock is the system clock with the wall clock off by skew.
type skewedClock struct {
	election.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return c.Clock.Now().Add(c.skew) }

// TestNodeAtprotoRevFollowsTheClusterClock: issue 22's future_rev outside the
// simulator, over libp2p. The founder's clock is 20 minutes fast: it writes the
// genesis (log time starts at its clock) and holds the lease. Once two devices on time
// joined, the revs it signs come from the cluster's clock (the earliest of the
// voters' clocks; peerclock.go): within a few seconds of the true time, where its own
// clock would sign revs 20 minutes ahead and relays refuse more than 5.
func TestNodeAtprotoRevFollowsTheClusterClock(t *testing.T) {
	psk := testutil.PSK(t)
	key, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	const fast = 20 * time.Minute
	cfg := nodeConfig(t, filepath.Join(root, "a"), psk, key)
	cfg.Bootstrap = true
	cfg.Clock = skewedClock{election.SystemClock(), fast}
	founder := startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "the founder leads", func() bool { return founder.State().Raft.Role == "Leader" })
	nodes := joinTwo(t, root, psk, key, founder)
	testutil.WaitFor(t, 10*time.Second, "the founder holds", func() bool { return holderOf(nodes...) == founder })
	if lt := time.UnixMilli(founder.log.View().LogTime); time.Until(lt) < fast-time.Minute {
		t.Fatalf("log time %v is not the founder's fast clock: the test does not test the case", lt)
	}
	testutil.WaitFor(t, 10*time.Second, "the founder's state shows the cluster clock", func() bool {
		c := founder.State().Clock.Cluster
		return c != nil && c.Known && c.Measured == 2
	})
	if off := time.Duration(founder.State().Clock.Cluster.OffsetMs) * time.Millisecond; off > -fast+5*time.Second || off < -fast-5*time.Second {
		t.Errorf("the founder's state: the cluster clock %v from its own, want about %v", off, -fast)
	}
	for i, rkey := range []string{"3l3qo2vut0001", "3l3qo2vut0002"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := founder.Submit(ctx, atPut(t, "rev-"+rkey, rkey, "post"), WaitSigned)
		cancel()
		if err != nil || res.Seq == 0 {
			t.Fatalf("submit %d: %+v %v", i, res, err)
		}
		rev := repoHead(t, founder).Rev
		tid, err := syntax.ParseTID(rev)
		if err != nil {
			t.Fatal(err)
		}
		if ahead := time.Until(tid.Time()); ahead > 5*time.Second {
			t.Errorf("seq %d: rev %s is %v ahead of the true time (the founder's clock is %v fast)", res.Seq, rev, ahead.Round(time.Millisecond), fast)
		}
	}
}
