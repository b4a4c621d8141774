package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Three devices form a cluster over libp2p; a follower's proposals are applied
// everywhere; the leader stops, a new one is elected and forwarding resumes.
func TestClusterForwardingAndFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.leader(tc.nodes)
	fol := tc.followers(leader)
	// Propose re-sends an entry after a leadership loss (entries must be
	// idempotent), so exact counts hold only while the term stays the same: on a
	// loaded machine an election can happen mid-test.
	term0 := leader.raft.Stats()["term"]
	sameTerm := func() bool { return leader.raft.State() == raft.Leader && leader.raft.Stats()["term"] == term0 }

	for i := range 5 {
		e := fmt.Appendf(nil, "from-follower-%d", i)
		res, err := fol[i%2].cluster.Propose(ctxTimeout(t, patient), e)
		if err != nil {
			t.Fatalf("propose on follower: %v", err)
		}
		if got := binary.BigEndian.Uint64(res); got != uint64(i+1) && sameTerm() {
			t.Fatalf("result %d, want %d (the leader's apply result)", got, i+1)
		}
	}
	res, err := leader.cluster.Propose(ctxTimeout(t, patient), []byte("from-leader"))
	if err != nil || (binary.BigEndian.Uint64(res) != 6 && sameTerm()) {
		t.Fatalf("propose on leader: %v %v", res, err)
	}
	waitApplied(t, tc.nodes, []byte("from-leader"))
	if leader.pipelines.Load() == 0 {
		t.Fatal("raft did not pipeline AppendEntries over the libp2p stream layer")
	}

	// Concurrent proposals from both followers: every one applied exactly once.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := fol[i%2].cluster.Propose(ctxTimeout(t, patient), fmt.Appendf(nil, "c-%d", i))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent propose: %v", err)
		}
	}
	waitFor(t, 10*time.Second, "every entry everywhere, the same sequence", func() bool {
		for i := range 40 {
			for _, n := range tc.nodes {
				if !n.fsm.has(fmt.Appendf(nil, "c-%d", i)) {
					return false
				}
			}
		}
		return sameEntries(tc.nodes[0].fsm, tc.nodes[1].fsm) && sameEntries(tc.nodes[0].fsm, tc.nodes[2].fsm)
	})
	if n := tc.nodes[0].fsm.len(); n != 46 {
		if sameTerm() {
			t.Fatalf("%d entries applied, want 46 (each exactly once: no leader change)", n)
		}
		t.Logf("%d entries applied (46 proposed): re-sent across a leader change", n)
	}
	leader.stop()
	newLeader := tc.leader(fol)
	if newLeader == leader {
		t.Fatal("stopped leader still leads")
	}
	survivor := tc.followers(newLeader)
	var other *node
	for _, n := range survivor {
		if n != leader {
			other = n
		}
	}
	if _, err := other.cluster.Propose(ctxTimeout(t, patient), []byte("after-failover")); err != nil {
		t.Fatalf("propose after failover: %v", err)
	}
	waitApplied(t, fol, []byte("after-failover"))
}

// A proposal made while the leader is down and no quorum exists fails with
// ErrNoLeader by the deadline, and succeeds once a leader is back (retrying inside
// one Propose call).
func TestProposeNoLeaderAndRetry(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.leader(tc.nodes)
	fol := tc.followers(leader)
	// Stop the leader and one follower: the last one can never elect.
	leader.stop()
	fol[0].stop()
	alone := fol[1]
	waitFor(t, 5*time.Second, "the lone follower to lose the leader", func() bool {
		return alone.cluster.Leader() == "" && alone.raft.State() != raft.Leader
	})
	start := time.Now()
	_, err := alone.cluster.Propose(ctxTimeout(t, 700*time.Millisecond), []byte("x"))
	took := time.Since(start)
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("got %v, want ErrNoLeader", err)
	}
	if took > 700*time.Millisecond+late {
		t.Fatalf("propose returned %v after a 700ms deadline", took)
	}
	// Bring one node back: a quorum of two elects a leader while Propose retries.
	fol[0].start()
	res, err := alone.cluster.Propose(ctxTimeout(t, patient), []byte("after-quorum"))
	if err != nil {
		t.Fatalf("propose while quorum returns: %v", err)
	}
	if len(res) != 8 {
		t.Fatalf("bad result %x", res)
	}
	waitApplied(t, []*node{alone, fol[0]}, []byte("after-quorum"))
}

// The leader's apply error comes back typed; a non-leader's NotLeader answer is
// retried at the real leader.
func TestForwardErrors(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.leader(tc.nodes)
	fol := tc.followers(leader)
	// Replace the leader's apply callback with one that fails.
	leader.cluster.apply = func(ctx context.Context, entry []byte) ([]byte, error) {
		if string(entry) == "bad" {
			return nil, errors.New("rejected by fsm")
		}
		return nil, ErrNotLeader
	}
	_, err := fol[0].cluster.Propose(ctxTimeout(t, patient), []byte("bad"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Msg != "rejected by fsm" || re.Peer != leader.id().String() {
		t.Fatalf("got %v, want RemoteError from the leader", err)
	}
	// A leader that keeps saying "not leader" makes the follower retry until the
	// deadline, then fail with ErrTimeout/ErrNoLeader, never later.
	start := time.Now()
	_, err = fol[0].cluster.Propose(ctxTimeout(t, 500*time.Millisecond), []byte("x"))
	if err == nil || !(errors.Is(err, ErrNoLeader) || errors.Is(err, ErrTimeout)) {
		t.Fatalf("got %v, want ErrNoLeader or ErrTimeout", err)
	}
	if time.Since(start) > 500*time.Millisecond+late {
		t.Fatalf("propose hung past its deadline: %v", time.Since(start))
	}
}
