package transport

import (
	"fmt"
	"testing"
	"time"
)

// TestFollowerBackFollowsAtOnce: a follower cut off long enough for Raft's replication
// to it to fail again and again (a laptop moving between networks) follows the leader
// within a few seconds of being reachable again. hashicorp/raft sleeps before every
// retry after a failed AppendEntries, doubling up to 10.24 s (replication.go:
// backoff(10ms, failures, 12)), and nothing but a success resets it: each failed dial
// to a peer that was away counted, so a device reachable again stayed behind for up
// to that long plus a dial (issue 39 item 8: 28 s once in 18 moves; the NAT test's
// 32-34 s in 2 of 7). A dial now waits for the peer to be reachable again, up to the
// RPC's timeout, instead of failing at once.
func TestFollowerBackFollowsAtOnce(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.leader(tc.nodes)
	f := tc.followers(leader)[0]
	cut := func(block bool) {
		for _, n := range tc.nodes {
			if n == f {
				continue
			}
			if block {
				n.host.Block(f.id())
				f.host.Block(n.id())
			} else {
				n.host.Unblock(f.id())
				f.host.Unblock(n.id())
			}
		}
	}
	cut(true)
	// While it is away the leader keeps writing: replication to it fails again and
	// again (2 s RPC timeout in these tests).
	away := time.Now()
	for i := 0; time.Since(away) < 12*time.Second; i++ {
		if _, err := leader.cluster.Propose(ctxTimeout(t, patient), []byte(fmt.Sprintf("away-%d", i))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the leader's load while the follower is away, not synchronisation
	}
	cut(false)
	back := time.Now()
	if _, err := leader.cluster.Propose(ctxTimeout(t, patient), []byte("back")); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, []*node{f}, []byte("back"))
	took := time.Since(back)
	t.Logf("the follower back after 12 s away applied the next entry %v after it was reachable", took.Round(10*time.Millisecond))
	if took > 4*time.Second {
		t.Fatalf("a follower reachable again applied the leader's entry only after %v (Raft's retry backoff is up to 10.24 s)", took)
	}
}
