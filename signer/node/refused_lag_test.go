package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/chain"
)

// lagTransport is a device's Raft transport that can be made to lag: while lagging,
// every AppendEntries that carries entries or the leader's commit index is answered
// with an error (the leader backs off and sends it again later), and the leader's
// heartbeats go through, so that the device keeps its leader and starts no election
// while its replica applies nothing new.
type lagTransport struct {
	*raft.InmemTransport
	out     chan raft.RPC
	lagging atomic.Bool
	stop    chan struct{}
}

var errLagging = errors.New("test: this replica lags")

func newLagTransport(t *testing.T, in *raft.InmemTransport) *lagTransport {
	lt := &lagTransport{InmemTransport: in, out: make(chan raft.RPC), stop: make(chan struct{})}
	go lt.run()
	t.Cleanup(func() { close(lt.stop) }) // after the nodes' Kill (cleanups run last first)
	return lt
}

func (lt *lagTransport) Consumer() <-chan raft.RPC { return lt.out }

func (lt *lagTransport) run() {
	in := lt.InmemTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			if ae, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && lt.lagging.Load() &&
				(len(ae.Entries) > 0 || ae.PrevLogEntry > 0 || ae.LeaderCommitIndex > 0) {
				// A response beside the error: the in-memory pipeline reads it.
				rpc.Respond(&raft.AppendEntriesResponse{Term: ae.Term}, errLagging)
				continue
			}
			select {
			case lt.out <- rpc:
			case <-lt.stop:
				return
			}
		case <-lt.stop:
			return
		}
	}
}

// resendEnd is a memEnd whose Propose can be taken over (the resend below).
type resendEnd struct {
	*memEnd
	hook atomic.Pointer[func(ctx context.Context, entry []byte) ([]byte, error, bool)]
}

func (e *resendEnd) Propose(ctx context.Context, entry []byte) ([]byte, error) {
	if h := e.hook.Load(); h != nil {
		if res, err, ok := (*h)(ctx, entry); ok {
			return res, err
		}
	}
	return e.memEnd.Propose(ctx, entry)
}

// TestLaggingReplicaNoFalseAlarm (issue 19.5, at the node level): three nodes over
// real Raft (in-memory transport, bolt files) with a holder that does not lead Raft.
// The holder's proposal of a commit reaches the leader twice, as a transport that
// resends after a leader change sends it: the first copy applies, then the holder
// signs the next commit on top of it, which applies too, and only then is the second
// copy refused (bad_prev, the head past its seq); that refusal is the answer the
// holder's loop gets, while the holder's own replica lags (it takes the leader's
// heartbeats but no entries) and has applied neither. Once the replica catches up the
// holder counts the commit as applied, keeps signing, and raises no alarm; the chain
// verifies and holds every op once. With the old rule (knob TrustRefusal: the refusal
// believed) the holder calls the commit refused and, when its replica applies it,
// raises the divergence alarm whose remedy is a repair.
//
// The loop signs the next commit while the first one's answer is outstanding because
// memNet's forward is in-process: the leader's apply runs with the loop's context and
// its "queued by Raft" callback (intentlog.WithEnqueued). In production that is the
// order of a holder that led Raft when it proposed both commits (its own Raft queued
// them) and then lost leadership, whose transport (transport.Cluster, after
// raft.ErrLeadershipLost) sent the first again to the new leader. Over libp2p and the
// simulator's forwarder a holder that does not lead awaits each forwarded proposal
// before it signs the next, so its own next commit never applies between the copies.
func TestLaggingReplicaNoFalseAlarm(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "fixed"
		if old {
			name = "old-false-alarm"
		}
		t.Run(name, func(t *testing.T) { laggingReplica(t, old) })
	}
}

func laggingReplica(t *testing.T, old bool) {
	key := testutil.Key(t, 7)
	mn := &memNet{handlers: map[string]Handlers{}, rafts: map[string]*raft.Raft{}}
	ids := []string{"dev-a", "dev-b", "dev-c"}
	var servers []raft.Server
	inmem := map[string]*raft.InmemTransport{}
	for _, id := range ids {
		_, inmem[id] = raft.NewInmemTransport(raft.ServerAddress(id))
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	for _, a := range ids {
		for _, b := range ids {
			inmem[a].Connect(raft.ServerAddress(b), inmem[b])
		}
	}
	lag := map[string]*lagTransport{}
	var mu sync.Mutex
	ends := map[string]*resendEnd{}
	nodes := map[string]*Node{}
	var all []*Node
	for _, id := range ids {
		lag[id] = newLagTransport(t, inmem[id])
		// A lease long enough that the holder's renewals, which wait for its lagging
		// replica, cannot end its hold while it lags.
		cfg := Config{DataDir: t.TempDir(), ChainKey: key, Bootstrap: true, TTL: 5 * nodeTTL, Tick: nodeTick,
			Logger: testutil.Logger(t), Raft: testutil.FastRaft}
		if old {
			cfg.Knobs = &knobs.Node{Signer: &knobs.Signer{TrustRefusal: true}}
		}
		n, err := New(cfg, Parts{ID: id, Raft: lag[id], Servers: servers,
			Net: func(r *raft.Raft, h Handlers) (Network, error) {
				nw, err := mn.part(id)(r, h)
				if err != nil {
					return nil, err
				}
				e := &resendEnd{memEnd: nw.(*memEnd)}
				mu.Lock()
				ends[id] = e
				mu.Unlock()
				return e, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Kill() })
		nodes[id] = n
		all = append(all, n)
	}

	// A holder that does not lead Raft, and a leader every node knows.
	var holder, leader *Node
	settled := func() bool {
		holder, leader = holderOf(all...), nil
		var lid raft.ServerID
		for _, n := range all {
			_, id := n.Log().Raft().LeaderWithID()
			if id == "" || (lid != "" && id != lid) {
				return false
			}
			lid = id
		}
		leader = nodes[string(lid)]
		return holder != nil && leader != nil && leader.Log().Raft().State() == raft.Leader
	}
	for attempt := 0; ; attempt++ {
		testutil.WaitFor(t, 20*time.Second, "a holder and a leader every node knows", settled)
		if holder != leader {
			break
		}
		if attempt == 3 {
			t.Fatalf("the holder %s still leads Raft after %d leadership transfers", holder.ID(), attempt)
		}
		// Once per attempt: Raft picks the most up-to-date follower.
		if err := leader.Log().Raft().LeadershipTransfer().Error(); err != nil {
			t.Logf("leadership transfer: %v", err)
		}
	}
	hid := holder.ID()
	t.Logf("holder %s, Raft leader %s", hid, leader.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.Submit(ctx, testutil.Put("before"), WaitSigned); err != nil {
		t.Fatal(err)
	}

	// The next commit the holder proposes reaches the leader twice. From the first
	// copy on, the holder's replica lags.
	mu.Lock()
	lh := mn.handlers[leader.ID()]
	mu.Unlock()
	var taken atomic.Bool
	var resentSeq atomic.Uint64
	var hookErr atomic.Pointer[error]
	answered := make(chan struct{})
	nextDone := make(chan error, 1)
	hook := func(pctx context.Context, entry []byte) ([]byte, error, bool) {
		e, err := intentlog.Decode(entry)
		if err != nil {
			return nil, nil, false
		}
		ce, ok := e.(intentlog.CommitEntry)
		if !ok {
			return nil, nil, false
		}
		c, err := chain.Decode(ce.Raw)
		if err != nil || !taken.CompareAndSwap(false, true) {
			return nil, nil, false // the commits after it go the ordinary way
		}
		defer close(answered)
		fail := func(err error) { hookErr.Store(&err) }
		lag[hid].lagging.Store(true)
		// Neither copy's answer is bounded by the loop's proposal timeout: the answer
		// the loop gets is the second copy's, however long this takes. The context keeps
		// the loop's "queued by the leader" callback, so the loop signs the next commit
		// behind this one once the leader has queued it.
		pctx = context.WithoutCancel(pctx)
		first, err := lh.Apply(pctx, entry)
		if err != nil {
			fail(fmt.Errorf("the first copy: %w", err))
			return first, err, true
		}
		if r, err := intentlog.DecodeResult(first); err != nil || !r.Accepted {
			fail(fmt.Errorf("the first copy was not accepted: %+v %v", r, err))
			return first, nil, true
		}
		// The next commit, signed by the holder on top of this one while the first
		// copy's answer is still on its way, applies before the second copy arrives.
		go func() {
			_, err := holder.Submit(ctx, testutil.Put("next"), WaitSigned)
			nextDone <- err
		}()
		dl := time.After(10 * time.Second)
		for leader.State().Head.Seq <= c.Seq {
			w := leader.Log().Watch()
			if leader.State().Head.Seq > c.Seq {
				break
			}
			select {
			case <-w:
			case <-dl:
				fail(fmt.Errorf("the leader's head never passed seq %d", c.Seq))
				return first, nil, true
			}
		}
		second, err := lh.Apply(pctx, entry)
		resentSeq.Store(c.Seq)
		return second, err, true
	}
	ends[hid].hook.Store(&hook)

	done := make(chan error, 1)
	go func() {
		_, err := holder.Submit(ctx, testutil.Put("resent"), WaitSigned)
		done <- err
	}()
	select {
	case <-answered:
	case <-ctx.Done():
		t.Fatal("the holder proposed no commit")
	}
	if p := hookErr.Load(); p != nil {
		t.Fatal(*p)
	}
	seq := resentSeq.Load()
	// The loop takes the answer: the old rule believes it, the fixed one leaves it to
	// the local chain.
	testutil.WaitFor(t, 10*time.Second, "the holder's loop to take the second copy's answer", func() bool {
		st := holder.loop.Stats()
		return st.CommitsRejected+st.SettledLocally > 0
	})
	if got := holder.State().Head.Seq; got >= seq {
		t.Fatalf("the holder's replica applied seq %d before its loop took the refusal of seq %d: it did not lag", got, seq)
	}
	if got := leader.State().Head.Seq; got <= seq {
		t.Fatalf("the leader's head is %d, not past the resent seq %d", got, seq)
	}
	st := holder.loop.Stats()
	lag[hid].lagging.Store(false)
	if old {
		if st.CommitsRejected != 1 || st.SettledLocally != 0 {
			t.Fatalf("the old rule did not call seq %d refused: %+v", seq, st)
		}
		testutil.WaitFor(t, 20*time.Second, "the old rule's divergence alarm", func() bool {
			return errors.Is(holder.Health(), ErrDiverged)
		})
		t.Logf("old rule: %v", holder.Health())
		return
	}
	if st.CommitsRejected != 0 || st.SettledLocally != 1 {
		t.Fatalf("the refusal of seq %d (head past it) was not settled locally: %+v", seq, st)
	}
	if err := <-done; err != nil {
		t.Fatalf("the submission in the resent commit: %v", err)
	}
	if err := <-nextDone; err != nil {
		t.Fatalf("the submission in the commit after it: %v", err)
	}
	for i := range 5 {
		if _, err := holder.Submit(ctx, testutil.Put(fmt.Sprintf("after-%d", i)), WaitSigned); err != nil {
			t.Fatalf("after the resend: %v", err)
		}
	}
	if err := holder.Health(); err != nil {
		t.Fatalf("health after the resend: %v", err)
	}
	if !holder.Holds() {
		t.Fatal("the holder gave the lease up")
	}
	if rs := holder.RefusalStats(); rs.SignedRefused != 0 || rs.Bumps != 0 {
		t.Fatalf("refusal stats %+v: the resent commit counted as refused", rs)
	}
	raws := chainOfNode(t, holder)
	if err := chain.VerifyChain(raws, key.DID()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range opIDs(t, raws) {
		seen[id]++
	}
	for _, id := range []string{"before", "resent", "next", "after-0", "after-4"} {
		if seen[id] != 1 {
			t.Fatalf("op %s %d times in the chain: %v", id, seen[id], seen)
		}
	}
	for _, raw := range raws[seq-1:] {
		c, err := chain.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if c.Signer != hid {
			t.Fatalf("commit seq %d signed by %s, not by the holder %s", c.Seq, c.Signer, hid)
		}
	}
	if err := wait.For(10*time.Second, "every replica at the holder's head", func() bool {
		h := holder.State().Head.Seq
		for _, n := range all {
			if n.State().Head.Seq != h {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
}
