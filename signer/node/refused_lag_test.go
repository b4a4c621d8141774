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
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
)

// lagTransport is a device's Raft transport with three faults, each off until set:
//   - lagging: every AppendEntries that carries entries or the leader's commit index
//     is held back (the leader's call times out and it sends again later) and
//     delivered, in order, once the lag ends; the leader's heartbeats go through, so
//     the device keeps its leader and starts no election while its replica applies
//     nothing new;
//   - mute (a device ID): that device's AppendEntries reach Raft here, but it gets an
//     error in place of the answer (this device appends entries the leader never
//     learns it has, so it commits none); its heartbeats go through;
//   - deaf (a device ID): every AppendEntries and vote request from that device is
//     answered with an error (it loses its leader lease and steps down, and cannot be
//     elected again).
type lagTransport struct {
	*raft.InmemTransport
	out     chan raft.RPC
	lagging atomic.Bool
	resume  chan struct{}
	mute    atomic.Pointer[string]
	deaf    atomic.Pointer[string]
	stop    chan struct{}
}

var errLagging = errors.New("test: this replica lags")

func newLagTransport(t *testing.T, in *raft.InmemTransport) *lagTransport {
	lt := &lagTransport{InmemTransport: in, out: make(chan raft.RPC), resume: make(chan struct{}, 1),
		stop: make(chan struct{})}
	go lt.run()
	t.Cleanup(func() { close(lt.stop) }) // after the nodes' Kill (cleanups run last first)
	return lt
}

func (lt *lagTransport) Consumer() <-chan raft.RPC { return lt.out }

func (lt *lagTransport) setLagging(v bool) {
	lt.lagging.Store(v)
	if !v {
		select {
		case lt.resume <- struct{}{}:
		default:
		}
	}
}

func (lt *lagTransport) run() {
	in := lt.InmemTransport.Consumer()
	var held []raft.RPC
	deliver := func(rpc raft.RPC) bool {
		select {
		case lt.out <- rpc:
			return true
		case <-lt.stop:
			return false
		}
	}
	for {
		if len(held) > 0 && !lt.lagging.Load() {
			for _, rpc := range held {
				if !deliver(rpc) {
					return
				}
			}
			held = nil
		}
		select {
		case rpc := <-in:
			switch lt.route(&rpc) {
			case routeHold:
				held = append(held, rpc)
			case routeDeliver:
				if !deliver(rpc) {
					return
				}
			}
		case <-lt.resume:
		case <-lt.stop:
			return
		}
	}
}

type route int

const (
	routeDeliver route = iota
	routeHold
	routeAnswered
)

func from(p *atomic.Pointer[string], rpc *raft.RPC) bool {
	id := p.Load()
	h, ok := rpc.Command.(raft.WithRPCHeader)
	return id != nil && ok && string(h.GetRPCHeader().ID) == *id
}

// route applies the faults to rpc (a response beside an error: the in-memory
// pipeline reads it).
func (lt *lagTransport) route(rpc *raft.RPC) route {
	ae, isAE := rpc.Command.(*raft.AppendEntriesRequest)
	if from(&lt.deaf, rpc) {
		var nack any
		switch rpc.Command.(type) {
		case *raft.AppendEntriesRequest:
			nack = &raft.AppendEntriesResponse{Term: ae.Term}
		case *raft.RequestVoteRequest:
			nack = &raft.RequestVoteResponse{}
		case *raft.RequestPreVoteRequest:
			nack = &raft.RequestPreVoteResponse{}
		default:
			return routeDeliver
		}
		rpc.Respond(nack, errLagging)
		return routeAnswered
	}
	carries := isAE && (len(ae.Entries) > 0 || ae.PrevLogEntry > 0 || ae.LeaderCommitIndex > 0)
	switch {
	case carries && lt.lagging.Load():
		return routeHold
	case carries && from(&lt.mute, rpc):
		rpc.Respond(&raft.AppendEntriesResponse{Term: ae.Term}, errLagging)
		rpc.RespChan = make(chan raft.RPCResponse, 1) // Raft's answer goes nowhere
	}
	return routeDeliver
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
// them) and then lost leadership before committing them, and sent the first again to
// the new leader (TestLeaderChangeResendNoFalseAlarm builds that order). Over libp2p
// and the simulator's forwarder a holder that does not lead awaits each forwarded
// proposal before it signs the next, so its own next commit never applies between
// the copies.
func TestLaggingReplicaNoFalseAlarm(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "fixed"
		if old {
			name = "old-false-alarm"
		}
		t.Run(name, func(t *testing.T) { laggingReplica(t, old) })
	}
}

// lagCluster is three nodes made by New over real Raft (in-memory transport, every
// device's behind a lagTransport) and memNet (every device's behind a resendEnd).
type lagCluster struct {
	key   chain.Key
	mn    *memNet
	nodes map[string]*Node
	all   []*Node
	lag   map[string]*lagTransport
	mu    sync.Mutex
	ends  map[string]*resendEnd
}

func newLagCluster(t *testing.T, old bool) *lagCluster {
	lc := &lagCluster{key: testutil.Key(t, 7), mn: &memNet{handlers: map[string]Handlers{}, rafts: map[string]*raft.Raft{}},
		nodes: map[string]*Node{}, lag: map[string]*lagTransport{}, ends: map[string]*resendEnd{}}
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
	for _, id := range ids {
		lc.lag[id] = newLagTransport(t, inmem[id])
		// A lease long enough that the holder's renewals, which fail while it lags
		// (or while nobody answers it), cannot end its hold before the refusal.
		cfg := Config{DataDir: t.TempDir(), ChainKey: lc.key, Bootstrap: true, TTL: 10 * nodeTTL, Tick: nodeTick,
			Logger: testutil.Logger(t), Raft: testutil.FastRaft}
		// Several commits in flight (the pipeline depth before issue 23): a later one
		// can apply before the resent copy of an earlier one.
		cfg.Knobs = &knobs.Node{Signer: &knobs.Signer{TrustRefusal: old, MaxInFlight: 8}}
		n, err := New(cfg, Parts{ID: id, Raft: lc.lag[id], Servers: servers,
			Net: func(r *raft.Raft, h Handlers) (Network, error) {
				nw, err := lc.mn.part(id)(r, h)
				if err != nil {
					return nil, err
				}
				e := &resendEnd{memEnd: nw.(*memEnd)}
				lc.mu.Lock()
				lc.ends[id] = e
				lc.mu.Unlock()
				return e, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Kill() })
		lc.nodes[id] = n
		lc.all = append(lc.all, n)
	}
	return lc
}

// arrange waits for a holder and a Raft leader every node knows, the holder leading
// Raft or not as asked; it moves Raft leadership once per attempt when needed.
func (lc *lagCluster) arrange(t *testing.T, holderLeads bool) (holder, leader *Node) {
	t.Helper()
	settled := func() bool {
		holder, leader = holderOf(lc.all...), nil
		var lid raft.ServerID
		for _, n := range lc.all {
			_, id := n.Log().Raft().LeaderWithID()
			if id == "" || (lid != "" && id != lid) {
				return false
			}
			lid = id
		}
		leader = lc.nodes[string(lid)]
		return holder != nil && leader != nil && leader.Log().Raft().State() == raft.Leader
	}
	for attempt := 0; ; attempt++ {
		testutil.WaitFor(t, 20*time.Second, "a holder and a leader every node knows", settled)
		if (holder == leader) == holderLeads {
			t.Logf("holder %s, Raft leader %s", holder.ID(), leader.ID())
			return holder, leader
		}
		if attempt == 3 {
			t.Fatalf("holder %s, Raft leader %s after %d leadership transfers", holder.ID(), leader.ID(), attempt)
		}
		// Once per attempt (without a target, Raft picks the most up-to-date follower).
		r := leader.Log().Raft()
		var f raft.Future
		if holderLeads {
			f = r.LeadershipTransferToServer(raft.ServerID(holder.ID()), raft.ServerAddress(holder.ID()))
		} else {
			f = r.LeadershipTransfer()
		}
		if err := f.Error(); err != nil {
			t.Logf("leadership transfer: %v", err)
		}
	}
}

// tookRefusal waits until the holder's loop has taken the refusal of the resent copy
// of seq (the old rule believes it, the fixed one leaves it to the local chain), and
// checks that the holder's replica had not applied seq then, while the leader's head
// was past it.
func tookRefusal(t *testing.T, holder, leader *Node, seq uint64) signer.LoopStats {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "the holder's loop to take the resent copy's refusal", func() bool {
		st := holder.loop.Stats()
		return st.CommitsRejected+st.SettledLocally > 0
	})
	if got := holder.State().Head.Seq; got >= seq {
		t.Fatalf("the holder's replica applied seq %d before its loop took the refusal of seq %d: it did not lag", got, seq)
	}
	if got := leader.State().Head.Seq; got <= seq {
		t.Fatalf("the leader's head is %d, not past the resent seq %d", got, seq)
	}
	return holder.loop.Stats()
}

// settledOrAlarm checks the end: with the old rule the refusal was believed and the
// holder raises the divergence alarm once its replica applies seq; with the fix the
// refusal was settled locally, the submissions in the resent commit and the one after
// it (done) succeed, the holder keeps signing, and the chain verifies with every op
// once.
func (lc *lagCluster) settledOrAlarm(t *testing.T, old bool, holder *Node, seq uint64, st signer.LoopStats, done ...chan error) {
	t.Helper()
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
	for i, d := range done {
		if err := <-d; err != nil {
			t.Fatalf("submission %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	if err := chain.VerifyChain(raws, lc.key.DID()); err != nil {
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
		if c.Signer != holder.ID() {
			t.Fatalf("commit seq %d signed by %s, not by the holder %s", c.Seq, c.Signer, holder.ID())
		}
	}
	testutil.WaitFor(t, 10*time.Second, "every replica at the holder's head", func() bool {
		h := holder.State().Head.Seq
		for _, n := range lc.all {
			if n.State().Head.Seq != h {
				return false
			}
		}
		return true
	})
}

func laggingReplica(t *testing.T, old bool) {
	lc := newLagCluster(t, old)
	holder, leader := lc.arrange(t, false)
	hid := holder.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.Submit(ctx, testutil.Put("before"), WaitSigned); err != nil {
		t.Fatal(err)
	}

	// The next commit the holder proposes reaches the leader twice. From the first
	// copy on, the holder's replica lags.
	lc.mu.Lock()
	lh := lc.mn.handlers[leader.ID()]
	lc.mu.Unlock()
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
		lc.lag[hid].setLagging(true)
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
	lc.ends[hid].hook.Store(&hook)

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
	st := tookRefusal(t, holder, leader, seq)
	lc.lag[hid].setLagging(false)
	lc.settledOrAlarm(t, old, holder, seq, st, done, nextDone)
}

// TestLeaderChangeResendNoFalseAlarm (issue 19.5 in the order production has, at the
// node level, nothing taken over but Raft's messages): the holder leads Raft and has
// two commits in flight (its own Raft queued the first, so it signed the second
// behind it); the other devices append both, but the holder never learns they did,
// commits neither, loses its leader lease and steps down (the others stop answering
// it and refuse it their votes). Both proposals end with an unknown outcome
// (raft.ErrLeadershipLost). A new leader commits both; the holder's replica lags (it
// takes the new leader's heartbeats but no entries), and its loop proposes the first
// commit again, the same bytes (transport.Cluster would resend it too): that copy is
// refused (bad_prev, the head past its seq). Fixed: settled from the local chain once
// the replica catches up: no alarm, the holder keeps signing, the chain verifies, ops
// once. Old rule (TrustRefusal): believed, and the divergence alarm.
func TestLeaderChangeResendNoFalseAlarm(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "fixed"
		if old {
			name = "old-false-alarm"
		}
		t.Run(name, func(t *testing.T) { leaderChangeResend(t, old) })
	}
}

func leaderChangeResend(t *testing.T, old bool) {
	lc := newLagCluster(t, old)
	holder, _ := lc.arrange(t, true)
	hid := holder.ID()
	var others []*Node
	for _, n := range lc.all {
		if n != holder {
			others = append(others, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.Submit(ctx, testutil.Put("before"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	seq := holder.State().Head.Seq + 1

	// The others append what the holder sends but it never hears that they did.
	for _, n := range others {
		lc.lag[n.ID()].mute.Store(&hid)
	}
	proposed := holder.loop.Stats().CommitsProposed
	done := make(chan error, 2)
	go func() {
		_, err := holder.Submit(ctx, testutil.Put("resent"), WaitSigned)
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the holder to propose seq "+fmt.Sprint(seq), func() bool {
		return holder.loop.Stats().CommitsProposed > proposed
	})
	go func() {
		_, err := holder.Submit(ctx, testutil.Put("next"), WaitSigned)
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the holder to propose the next commit behind it", func() bool {
		return holder.loop.Stats().CommitsProposed > proposed+1
	})
	testutil.WaitFor(t, 10*time.Second, "the others to append both commits", func() bool {
		for _, n := range others {
			if !appended(t, n, seq, seq+1) {
				return false
			}
		}
		return true
	})
	if got := holder.State().Head.Seq; got >= seq {
		t.Fatalf("the holder committed seq %d while the others were mute", got)
	}

	// The holder loses Raft leadership and its replica lags.
	lc.lag[hid].setLagging(true)
	for _, n := range others {
		lc.lag[n.ID()].deaf.Store(&hid)
	}
	var leader *Node
	testutil.WaitFor(t, 20*time.Second, "a new leader that the holder knows", func() bool {
		_, lid := holder.Log().Raft().LeaderWithID()
		leader = lc.nodes[string(lid)]
		return leader != nil && leader != holder && leader.Log().Raft().State() == raft.Leader
	})
	t.Logf("new Raft leader %s", leader.ID())
	st := tookRefusal(t, holder, leader, seq)
	if st.ProposeErrors < 2 {
		t.Fatalf("the holder's proposals of seq %d and %d did not end unknown: %+v", seq, seq+1, st)
	}
	for _, n := range others {
		lc.lag[n.ID()].deaf.Store(nil)
		lc.lag[n.ID()].mute.Store(nil)
	}
	lc.lag[hid].setLagging(false)
	lc.settledOrAlarm(t, old, holder, seq, st, done, done)
}

// appended reports whether n's Raft log holds a commit entry for each of seqs.
func appended(t *testing.T, n *Node, seqs ...uint64) bool {
	t.Helper()
	want := map[uint64]bool{}
	for _, s := range seqs {
		want[s] = true
	}
	err := n.Log().ForEachEntry(1, func(e intentlog.RaftEntry) error {
		if ce, ok := e.Entry.(intentlog.CommitEntry); ok {
			if c, err := chain.Decode(ce.Raw); err == nil {
				delete(want, c.Seq)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s's Raft log: %v", n.ID(), err)
	}
	return len(want) == 0
}
