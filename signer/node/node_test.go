package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/election"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// TestNodeCluster runs three real Nodes over libp2p on loopback: formation (bootstrap
// plus two joins through a join window), signing through a follower, group commit,
// duplicates, graceful stop of the holder, restart, kill of the holder, and the chain
// on every node (verifies, agrees, every accepted intent exactly once). Subtests share
// the cluster and run in order.
func TestNodeCluster(t *testing.T) {
	psk := testutil.PSK(t)
	key := testutil.Key(t, 7)
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}
	nodes := make([]*Node, 3)
	var accepted []string // every intent ID answered with success
	var mu sync.Mutex
	accept := func(ids ...string) {
		mu.Lock()
		accepted = append(accepted, ids...)
		mu.Unlock()
	}
	live := func() []*Node {
		var out []*Node
		for _, n := range nodes {
			if n != nil {
				out = append(out, n)
			}
		}
		return out
	}
	ctx := context.Background()
	T := t // nodes live as long as the whole test, not one subtest

	t.Run("form", func(t *testing.T) {
		cfg := nodeConfig(T, dirs[0], psk, key)
		cfg.Bootstrap = true
		nodes[0] = startNode(T, cfg)
		testutil.WaitFor(t, 10*time.Second, "first node leads", func() bool { return nodes[0].State().Raft.Role == "Leader" })
		token := []byte("join-token-0123456789")
		nodes[0].AllowJoins(token, time.Now().Add(time.Minute), 2)
		for i := 1; i < 3; i++ {
			cfg := nodeConfig(T, dirs[i], psk, key)
			cfg.Join = &JoinConfig{Seeds: nodes[0].Addrs(), Token: token}
			nodes[i] = startNode(T, cfg)
		}
		testutil.WaitFor(t, 10*time.Second, "three members everywhere", func() bool {
			for _, n := range nodes {
				if n.State().Members != 3 {
					return false
				}
			}
			return true
		})
		// Followers learn each other's addresses at the transport's next membership
		// sync (up to a SyncInterval after a join); until then a failover is slower.
		testutil.WaitFor(t, 10*time.Second, "address books complete", func() bool {
			for _, n := range nodes {
				ms := n.Host().Members()
				if len(ms) != 2 || len(ms[0].Addrs) == 0 || len(ms[1].Addrs) == 0 {
					return false
				}
			}
			return true
		})
		testutil.WaitFor(t, 10*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
		if n := nodes[1]; n.Chain() != key.DID() || n.ID() == nodes[0].ID() || len(n.Addrs()) == 0 {
			t.Fatalf("identity: chain %s id %s addrs %v", n.Chain(), n.ID(), n.Addrs())
		}
	})

	// follower returns a node that neither holds the lease nor leads Raft, if any.
	follower := func() *Node {
		for _, n := range live() {
			if !n.Holds() && n.State().Raft.Role != "Leader" {
				return n
			}
		}
		for _, n := range live() {
			if !n.Holds() {
				return n
			}
		}
		return nil
	}

	t.Run("submit_on_follower_wait_signed", func(t *testing.T) {
		f := follower()
		entriesBefore := f.batch.entriesMade()
		start := time.Now()
		res, err := f.Submit(ctx, testutil.Put("f-1"), WaitSigned)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("submit on a follower to signed: %s", time.Since(start.Round(time.Millisecond)))
		accept("f-1")
		if res.ID != "f-1" || res.Index == 0 || res.Seq == 0 || len(res.Hash) != 64 || res.Duplicate {
			t.Fatalf("result %+v", res)
		}
		// Forwarded to the live holder, whose commit carried it: no intents entry.
		if e := f.batch.entriesMade() - entriesBefore; e != 0 {
			t.Fatalf("%d intents entries for a submission a live holder could take", e)
		}
		v, ok, err := f.Record("app.test/f-1")
		if err != nil || !ok || string(v) != "v-f-1" {
			t.Fatalf("record on the submitting follower: %q %v %v", v, ok, err)
		}
		// Same id again: the original result.
		again, err := f.Submit(ctx, testutil.Put("f-1"), WaitCommitted)
		if err != nil || !again.Duplicate || again.Index != res.Index || again.Seq != res.Seq || again.Hash != res.Hash {
			t.Fatalf("duplicate: %+v %v (first %+v)", again, err, res)
		}
	})

	t.Run("group_commit", func(t *testing.T) {
		f := follower()
		before := f.batch.entriesMade()
		const N = 64
		var wg sync.WaitGroup
		errs := make([]error, N)
		res := make([]SubmitResult, N)
		for i := range N {
			wg.Go(func() {
				res[i], errs[i] = f.Submit(ctx, testutil.Put(fmt.Sprintf("g-%d", i)), WaitCommitted)
			})
		}
		wg.Wait()
		seqs := map[uint64]bool{}
		for i := range N {
			if errs[i] != nil {
				t.Fatalf("submit %d: %v", i, errs[i])
			}
			accept(res[i].ID)
			seqs[res[i].Seq] = true
		}
		entries := f.batch.entriesMade() - before
		t.Logf("group commit: %d concurrent submissions forwarded to the holder, signed in %d commits (%d intents entries)", N, len(seqs), entries)
		// On a loaded machine the holder can answer a forward not_holder while its
		// renewal is late (CI's -race run at load 9: 2 entries), and the follower then
		// batches those itself: a few entries are not a failure, one per submission is.
		if entries > N/8 || len(seqs) >= N || seqs[0] {
			t.Fatalf("no group commit: %d submissions, %d commits, %d entries", N, len(seqs), entries)
		}
		waitSigned(t, f, "g-63")
	})

	t.Run("read_barrier_on_follower", func(t *testing.T) {
		var leader, f *Node
		testutil.WaitFor(t, 10*time.Second, "a leader and a follower", func() bool {
			leader, f = nil, nil
			for _, n := range live() {
				if n.State().Raft.Role == "Leader" {
					leader = n
				} else {
					f = n
				}
			}
			return leader != nil && f != nil
		})
		// Make the leader's applied index move, then barrier on the follower at once.
		if _, err := leader.Submit(ctx, testutil.Put("barrier-1"), WaitCommitted); err != nil {
			t.Fatal(err)
		}
		accept("barrier-1")
		want := leader.log.View().AppliedIndex
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := f.prop.Sync(sctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("read barrier from a follower: %s", time.Since(start.Round(time.Millisecond)))
		if got := f.log.View().AppliedIndex; got < want {
			t.Fatalf("follower applied %d after Sync, leader had %d", got, want)
		}
		if _, ok, _ := f.log.IntentStatus("barrier-1"); !ok {
			t.Fatal("follower does not see the intent after Sync")
		}
	})

	t.Run("transfer", func(t *testing.T) {
		h := holderOf(live()...)
		if h == nil {
			t.Fatal("no holder")
		}
		var to *Node
		for _, n := range live() {
			if n != h {
				to = n
				break
			}
		}
		epoch := h.State().Lease.Epoch
		lost := h.Lost()
		hold := h.HoldContext()
		start := time.Now()
		if err := h.Transfer(ctx, to.ID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lost:
		default:
			t.Fatal("Lost not closed after the transfer")
		}
		if hold.Err() == nil {
			t.Fatal("HoldContext not cancelled after the transfer")
		}
		testutil.WaitFor(t, 5*time.Second, "the target holds", to.Holds)
		t.Logf("transfer: target holds after %s", time.Since(start.Round(time.Millisecond)))
		if st := to.State(); st.Lease.Holder != to.ID() || st.Lease.Epoch < epoch+1 {
			t.Fatalf("after transfer: %+v", st.Lease)
		}
		if _, err := h.Submit(ctx, testutil.Put("after-transfer"), WaitSigned); err != nil {
			t.Fatal(err)
		}
		accept("after-transfer")
		if err := h.Transfer(ctx, to.ID()); !errors.Is(err, election.ErrNotHolder) {
			t.Fatalf("transfer by a non-holder: %v", err)
		}
		if err := h.HolderTransfer(ctx, to.ID()); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("transfer to the device that holds already, asked of another: %v", err)
		}
	})

	// HolderRelease and HolderTransfer asked of a device that does not hold the lease
	// go to the holder, which does them (operators run `baton lease transfer` anywhere);
	// a request naming an epoch the holder has left behind is refused, never applied to
	// a later hold; and Release (this device's hold: exec, leave) never ends another's.
	t.Run("handover_asked_of_a_standby", func(t *testing.T) {
		var h *Node
		testutil.WaitFor(t, 10*time.Second, "a holder", func() bool { h = holderOf(live()...); return h != nil })
		var others []*Node
		for _, n := range live() {
			if n != h {
				others = append(others, n)
			}
		}
		asker, to := others[0], others[1]
		testutil.WaitFor(t, 5*time.Second, "the asker sees the holder", func() bool { return asker.State().Lease.Holder == h.ID() })
		epoch := h.State().Lease.Epoch
		if err := asker.Release(ctx); !errors.Is(err, election.ErrNotHolder) {
			t.Fatalf("Release by a standby: %v", err)
		}
		if !h.Holds() {
			t.Fatal("a standby's Release ended the holder's hold")
		}
		if err := asker.HolderTransfer(ctx, to.ID()); err != nil {
			t.Fatalf("transfer asked of a standby: %v", err)
		}
		// The asker's replica shows the transfer at once (the API answers with it): the
		// transfer's epoch, or already the target's claim over it (epoch+2: under
		// -race with a loaded machine the claim applied before State read, once).
		if l := asker.State().Lease; l.Holder != to.ID() || l.Epoch < epoch+1 || l.Epoch > epoch+2 {
			t.Fatalf("the asker's lease right after the forwarded transfer: %+v", l)
		}
		testutil.WaitFor(t, 5*time.Second, "the target holds", to.Holds)
		if st := to.State(); st.Lease.Epoch <= epoch {
			t.Fatalf("after a forwarded transfer: %+v", st.Lease)
		}
		if h.Holds() {
			t.Fatal("the old holder still holds")
		}
		// A late request for the old epoch, delivered to the new holder, is refused.
		body, _ := json.Marshal(handoverRequest{Epoch: epoch})
		out, err := to.handleCall(ctx, asker.ID(), append([]byte{callRelease}, body...))
		var ans handoverAnswer
		if err != nil || json.Unmarshal(out, &ans) != nil || ans.Err != "not_holder" {
			t.Fatalf("release for a past epoch: %s %v", out, err)
		}
		if !to.Holds() {
			t.Fatal("a release for a past epoch ended the hold")
		}
		if err := asker.HolderRelease(ctx); err != nil {
			t.Fatalf("release asked of a standby: %v", err)
		}
		if to.Holds() {
			t.Fatal("the holder still holds after a forwarded release")
		}
		testutil.WaitFor(t, 10*time.Second, "a holder again", func() bool { return holderOf(live()...) != nil })
		if _, err := asker.Submit(ctx, testutil.Put("after-forwarded-release"), WaitSigned); err != nil {
			t.Fatal(err)
		}
		accept("after-forwarded-release")
	})

	t.Run("members", func(t *testing.T) {
		token := []byte("second-join-token")
		nodes[0].AllowJoin(token, time.Now().Add(time.Minute))
		cfg := nodeConfig(T, filepath.Join(root, "d"), psk, nil)
		cfg.Chain = key.DID()
		cfg.Join = &JoinConfig{Seeds: nodes[0].Addrs(), Token: token, NonVoter: true}
		d := startNode(T, cfg)
		defer d.Kill()
		testutil.WaitFor(t, 10*time.Second, "four members", func() bool { return nodes[0].State().Members == 4 })
		ms, err := nodes[2].Members()
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ms, func(m transport.Member) bool { return m.ID.String() == d.ID() })
		if len(ms) != 4 || i < 0 || ms[i].Suffrage == raft.Voter {
			t.Fatalf("members: %+v", ms)
		}
		// The replica without a chain key follows the chain but never holds.
		want := nodes[0].State().Head.Seq
		testutil.WaitFor(t, 10*time.Second, "the replica catches up", func() bool { return d.State().Head.Seq >= want })
		if d.Holds() || d.State().Signer {
			t.Fatal("a replica without a chain key holds or claims to sign")
		}
		if err := nodes[2].RemoveMember(ctx, d.ID()); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "three members again", func() bool { return nodes[0].State().Members == 3 })

		// An operator adds a running device through the API (POST /v1/members); it
		// then leaves on its own.
		ecfg := nodeConfig(T, filepath.Join(root, "e"), psk, nil)
		ecfg.Chain = key.DID()
		e := startNode(T, ecfg)
		defer e.Kill()
		for _, m := range live() {
			e.Host().AllowPeer(m.Host().AddrInfo())
		}
		if err := nodes[2].AddMember(ctx, e.Addrs()[0], true); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "four members", func() bool { return nodes[0].State().Members == 4 })
		testutil.WaitFor(t, 10*time.Second, "the added device applies", func() bool { return e.State().Head.Seq >= want })
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		// RemoveMember of this device itself is a Leave.
		if err := e.RemoveMember(lctx, e.ID()); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "three members after leave", func() bool { return nodes[0].State().Members == 3 })
	})

	t.Run("partitioned_holder_loses_the_lease", func(t *testing.T) {
		h := holderOf(live()...)
		if h == nil {
			testutil.WaitFor(t, 5*time.Second, "a holder", func() bool { return holderOf(live()...) != nil })
			h = holderOf(live()...)
		}
		var others []*Node
		for _, n := range live() {
			if n != h {
				others = append(others, n)
			}
		}
		lost, hold := h.Lost(), h.HoldContext()
		start := time.Now()
		for _, o := range others {
			h.Host().Block(o.Host().ID())
			o.Host().Block(h.Host().ID())
		}
		select {
		case <-lost:
		case <-time.After(2 * time.Second):
			t.Fatal("the partitioned holder's Lost did not close")
		}
		lostAfter := time.Since(start)
		if hold.Err() == nil {
			t.Fatal("HoldContext not cancelled")
		}
		testutil.WaitFor(t, 4*time.Second, "a holder on the majority side", func() bool { return holderOf(others...) != nil })
		took := time.Since(start)
		if _, err := others[0].Submit(ctx, testutil.Put("majority-1"), WaitSigned); err != nil {
			t.Fatal(err)
		}
		accept("majority-1")
		t.Logf("partitioned holder: Lost after %s (may-sign window 2/3 TTL), majority holds after %s", lostAfter.Round(time.Millisecond), took.Round(time.Millisecond))
		if lostAfter > time.Second {
			t.Errorf("Lost closed %v after the partition, TTL %v", lostAfter, time.Second)
		}
		if h.Holds() {
			t.Fatal("the partitioned device still holds")
		}
		for _, o := range others {
			h.Host().Unblock(o.Host().ID())
			o.Host().Unblock(h.Host().ID())
		}
		want := others[0].State().Head.Seq
		testutil.WaitFor(t, 10*time.Second, "the healed device catches up", func() bool { return h.State().Head.Seq >= want })
	})

	var stoppedIdx int
	t.Run("graceful_stop_of_holder", func(t *testing.T) {
		// After the heal above the lease may still be moving (a loaded machine).
		testutil.WaitFor(t, 20*time.Second, "a holder", func() bool { return holderOf(live()...) != nil })
		h := holderOf(live()...)
		stoppedIdx = slices.Index(nodes, h)
		wasLeader := h.State().Raft.Role == "Leader"
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := h.Stop(sctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		nodes[stoppedIdx] = nil
		stopTook := time.Since(start)
		testutil.WaitFor(t, 5*time.Second, "a new holder after graceful stop", func() bool { return holderOf(live()...) != nil })
		f := live()[0]
		if _, err := f.Submit(ctx, testutil.Put("after-stop"), WaitSigned); err != nil {
			t.Fatal(err)
		}
		accept("after-stop")
		t.Logf("graceful stop of the holder: Stop took %s; next signed commit %s after Stop began (holder was raft leader: %v)", stopTook.Round(time.Millisecond), time.Since(start.Round(time.Millisecond)), wasLeader)
		if took := time.Since(start); took > time.Second {
			t.Errorf("handover after a graceful stop took %v", took)
		}
		hist, err := f.LeaseHistory()
		if err != nil || len(hist) == 0 {
			t.Fatal(hist, err)
		}
		if !slices.ContainsFunc(hist, func(e intentlog.LeaseEvent) bool { return e.Event == "release" }) {
			t.Fatalf("no release in the lease history: %+v", hist)
		}
	})

	t.Run("restart", func(t *testing.T) {
		if nodes[stoppedIdx] != nil {
			t.Fatal("no device was stopped (graceful_stop_of_holder failed)")
		}
		nodes[stoppedIdx] = startNode(T, nodeConfig(T, dirs[stoppedIdx], psk, key))
		want := live()[0].State().Head.Seq
		testutil.WaitFor(t, 10*time.Second, "restarted node catches up", func() bool {
			return nodes[stoppedIdx].State().Head.Seq >= want
		})
	})

	t.Run("kill_holder", func(t *testing.T) {
		h := holderOf(live()...)
		if h == nil {
			testutil.WaitFor(t, 5*time.Second, "a holder", func() bool { return holderOf(live()...) != nil })
			h = holderOf(live()...)
		}
		i := slices.Index(nodes, h)
		start := time.Now()
		if err := h.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		nodes[i] = nil
		testutil.WaitFor(t, 4*time.Second+2*time.Second, "a new holder after kill", func() bool { return holderOf(live()...) != nil })
		took := time.Since(start)
		f := live()[0]
		if _, err := f.Submit(ctx, testutil.Put("after-kill"), WaitSigned); err != nil {
			t.Fatal(err)
		}
		accept("after-kill")
		t.Logf("kill of the holder: new holder after %s, next signed commit after %s (TTL %v, tick %v)",
			took.Round(time.Millisecond), time.Since(start.Round(time.Millisecond)), time.Second, nodeTick)
		// The promise: TTL + one tick + one Raft election (a few hundred ms here).
		if limit := time.Second + nodeTick + 1500*time.Millisecond; took > limit {
			t.Errorf("takeover took %v, over %v", took, limit)
		}
		// Restart the killed one: its data dir is reusable.
		nodes[i] = startNode(T, nodeConfig(T, dirs[i], psk, key))
	})

	t.Run("chains_agree", func(t *testing.T) {
		ns := live()
		head := uint64(0)
		for _, n := range ns {
			head = max(head, n.State().Head.Seq)
		}
		testutil.WaitFor(t, 10*time.Second, "all nodes at the same head", func() bool {
			for _, n := range ns {
				if n.State().Head.Seq < head {
					return false
				}
			}
			return true
		})
		var first [][]byte
		for _, n := range ns {
			raws := chainOfNode(t, n)
			if err := chain.VerifyChain(raws, key.DID()); err != nil {
				t.Fatalf("node %s: %v", n.ID(), err)
			}
			if first == nil {
				first = raws
			} else if !slices.EqualFunc(first[:head], raws[:head], func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Fatalf("node %s: chain differs", n.ID())
			}
		}
		ids := opIDs(t, first)
		count := map[string]int{}
		for _, id := range ids {
			count[id]++
		}
		for _, id := range accepted {
			if count[id] != 1 {
				t.Errorf("accepted intent %q appears %d times in the chain", id, count[id])
			}
		}
		for id, c := range count {
			if c != 1 {
				t.Errorf("intent %q appears %d times", id, c)
			}
		}
		t.Logf("chain: %d commits, %d intents, %d accepted answers", len(first), len(ids), len(accepted))
	})

	t.Run("state_without_quorum", func(t *testing.T) {
		ns := live()
		last := ns[len(ns)-1]
		for _, n := range ns[:len(ns)-1] {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
			nodes[slices.Index(nodes, n)] = nil
		}
		var worst time.Duration
		for range 20 {
			start := time.Now()
			st := last.State()
			worst = max(worst, time.Since(start))
			if st.ID != last.ID() {
				t.Fatalf("state of %s from %s", st.ID, last.ID())
			}
		}
		t.Logf("State with no quorum: worst of 20 %s", worst.Round(time.Millisecond))
		if worst > 100*time.Millisecond {
			t.Errorf("state took %v with no quorum", worst)
		}
		// A submission without quorum fails with a clear code, bounded by its deadline.
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := last.Submit(sctx, testutil.Put("no-quorum"), WaitCommitted)
		// No quorum (no leader left) or a timeout (the lone device still led when the
		// deadline came): either way bounded by the deadline, outcome unknown.
		if !errors.Is(err, transport.ErrNoLeader) && !errors.Is(err, ErrNoQuorum) && !errors.Is(err, ErrTimeout) {
			t.Fatalf("submit without quorum: %v", err)
		}
	})
}

func waitSigned(t *testing.T, n *Node, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n.waitSigned(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestNodeKnobs: BeforePropose sees every kind of proposal the node makes, and Kill
// returns (bounded) even while a proposal is frozen in the knob; nothing proposed
// after the kill leaves the node.
func TestNodeKnobs(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	freeze := make(chan struct{})
	var frozen sync.Once
	frozenCh := make(chan struct{})
	var armed bool
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 5))
	cfg.Bootstrap = true
	cfg.Knobs = &knobs.Node{}
	cfg.Knobs.BeforePropose = func(ctx context.Context, e any) context.Context {
		mu.Lock()
		seen[fmt.Sprintf("%T", e)]++
		a := armed
		mu.Unlock()
		if _, ok := e.(intentlog.CommitEntry); ok && a {
			frozen.Do(func() { close(frozenCh) })
			<-freeze // ignores ctx on purpose: the worst knob
		}
		return ctx
	}
	n := startNode(t, cfg)
	ctx := context.Background()
	if _, err := n.Submit(ctx, testutil.Put("k-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, kind := range []string{"intentlog.ClaimEntry", "intentlog.CommitEntry"} {
		if seen[kind] == 0 {
			t.Errorf("BeforePropose never saw a %s (saw %v)", kind, seen)
		}
	}
	armed = true
	mu.Unlock()
	submitted := make(chan error, 1)
	go func() {
		_, err := n.Submit(ctx, testutil.Put("k-2"), WaitCommitted)
		submitted <- err
	}()
	select {
	case <-frozenCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the commit never reached the knob")
	}
	head := n.log.View().Head.Seq
	start := time.Now()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	close(freeze)
	t.Logf("Kill with a proposal frozen in the knob: %s", took.Round(time.Millisecond))
	if took > killWait+time.Second {
		t.Errorf("Kill took %v", took)
	}
	if err := <-submitted; !errors.Is(err, ErrStopped) {
		t.Fatalf("the submission whose commit froze: %v, want ErrStopped (not acknowledged)", err)
	}
	// Restart on the same data dir: the frozen commit never left, so the head is
	// where it was; the client's retry of k-2 is signed once.
	cfg.Knobs = nil
	cfg.Bootstrap = false
	n2 := startNode(t, cfg)
	if got := n2.log.View().Head.Seq; got != head {
		t.Fatalf("head after restart %d, before kill %d", got, head)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := n2.Submit(rctx, testutil.Put("k-2"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	raws := chainOfNode(t, n2)
	if err := chain.VerifyChain(raws, n2.Chain()); err != nil {
		t.Fatal(err)
	}
	if ids := opIDs(t, raws); fmt.Sprint(ids) != "[k-1 k-2]" {
		t.Fatalf("chain ops %v", ids)
	}
}

// TestNodeStopLeavesNoGoroutines: after Stop (and after Kill) every goroutine the
// node started (host, Raft, cluster, lease, loop, API, followers) is gone, except one
// parked on a hashicorp/raft future that Raft never answered because it shut down
// meanwhile (hashicorp/raft#498, open upstream: a barrier or apply racing Shutdown;
// seen in CI as intentlog's nudge waiting on its barrier). Those are counted apart
// and logged, as testnet/sim does; any other goroutine left fails the test.
func TestNodeStopLeavesNoGoroutines(t *testing.T) {
	for _, kill := range []bool{false, true} {
		base, _ := goroutines()
		cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 3))
		cfg.Bootstrap = true
		n, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Submit(context.Background(), testutil.Put("l1"), WaitSigned); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithCancel(context.Background())
		ch := n.Commits(fctx, 1, true)
		<-ch
		if kill {
			err = n.Kill()
		} else {
			err = n.Stop(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch {
		}
		var upstream int
		if err := wait.For(20*time.Second, fmt.Sprintf("goroutines back to %d (kill %v)", base, kill), func() bool {
			var n int
			n, upstream = goroutines()
			return n <= base
		}); err != nil {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Fatalf("%v; the goroutines left:\n%s", err, buf.String())
		}
		if upstream > 0 {
			t.Logf("kill %v: %d goroutine(s) parked on a raft future Raft never answered after Shutdown (hashicorp/raft#498)", kill, upstream)
		}
	}
}

// goroutines counts this process's goroutines, apart from those parked on a
// hashicorp/raft future after Raft shut down (hashicorp/raft#498), counted second.
func goroutines() (n, upstream int) {
	buf := make([]byte, 1<<20)
	for {
		m := runtime.Stack(buf, true)
		if m < len(buf) {
			buf = buf[:m]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/hashicorp/raft.(*deferError).Error") {
			upstream++
			continue
		}
		n++
	}
	return n, upstream
}

// On the device that holds the lease, a submission costs one Raft round: the commit
// that signs it carries it (no intents entry), and every commit signed is applied.
func TestNodeSignsInOneRound(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 0))
	cfg.Bootstrap = true
	n := startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "the lease", n.Holds)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("p%02d", i)
		r, err := n.Submit(ctx, testutil.Put(id), WaitSigned)
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq == 0 || r.Hash == "" {
			t.Fatalf("result %+v", r)
		}
		ids = append(ids, id)
	}
	raws := chainOfNode(t, n)
	if err := chain.VerifyChain(raws, n.Chain()); err != nil {
		t.Fatal(err)
	}
	if got := opIDs(t, raws); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("chain ops %v, want %v", got, ids)
	}
	st := n.loop.Stats()
	if e := n.batch.entriesMade(); e != 0 || st.CommitsSigned != st.CommitsAccepted || st.SignedRefused != 0 {
		t.Fatalf("%d intents entries, loop stats %+v", e, st)
	}
}
