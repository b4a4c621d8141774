package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// memNet is an in-process Network over a registry of the devices' handlers: what a
// simulator supplies in place of libp2p.
type memNet struct {
	mu       sync.Mutex
	handlers map[string]Handlers
	rafts    map[string]*raft.Raft
}

type memEnd struct {
	net *memNet
	id  string
}

func (m *memNet) part(id string) func(*raft.Raft, Handlers) (Network, error) {
	return func(r *raft.Raft, h Handlers) (Network, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.handlers[id], m.rafts[id] = h, r
		return &memEnd{net: m, id: id}, nil
	}
}

// leader returns the handlers of the device this one believes leads.
func (e *memEnd) leader() (Handlers, error) {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	_, lid := e.net.rafts[e.id].LeaderWithID()
	h, ok := e.net.handlers[string(lid)]
	if lid == "" || !ok {
		return Handlers{}, transport.ErrNoLeader
	}
	return h, nil
}

func (e *memEnd) Propose(ctx context.Context, entry []byte) ([]byte, error) {
	for {
		h, err := e.leader()
		if err == nil {
			return h.Apply(ctx, entry)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(5 * time.Millisecond): // no leader yet: the retry delay of a forward
		}
	}
}

func (e *memEnd) Barrier(ctx context.Context) (uint64, error) {
	h, err := e.leader()
	if err != nil {
		return 0, err
	}
	return h.Barrier(ctx)
}

func (e *memEnd) Call(ctx context.Context, to string, payload []byte) ([]byte, error) {
	e.net.mu.Lock()
	h, ok := e.net.handlers[to]
	e.net.mu.Unlock()
	if !ok {
		return nil, transport.ErrUnreachable
	}
	return h.Call(ctx, e.id, payload)
}

func (e *memEnd) Close() error {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	delete(e.net.handlers, e.id)
	return nil
}

// TestNewOverAnotherNetwork: three nodes assembled by New over Raft's in-memory
// transport and an in-process Network elect a holder and sign submissions made on
// every device into one chain.
func TestNewOverAnotherNetwork(t *testing.T) {
	key := testutil.Key(t, 7)
	mn := &memNet{handlers: map[string]Handlers{}, rafts: map[string]*raft.Raft{}}
	ids := []string{"dev-a", "dev-b", "dev-c"}
	var servers []raft.Server
	trans := map[string]*raft.InmemTransport{}
	for _, id := range ids {
		_, trans[id] = raft.NewInmemTransport(raft.ServerAddress(id))
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	for _, a := range ids {
		for _, b := range ids {
			trans[a].Connect(raft.ServerAddress(b), trans[b])
		}
	}
	var nodes []*Node
	for _, id := range ids {
		cfg := Config{DataDir: t.TempDir(), ChainKey: key, Bootstrap: true, TTL: nodeTTL, Tick: nodeTick,
			Logger: testutil.Logger(t), Raft: testutil.FastRaft}
		n, err := New(cfg, Parts{ID: id, Raft: trans[id], Net: mn.part(id), Servers: servers})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Kill() })
		nodes = append(nodes, n)
	}
	testutil.WaitFor(t, 10*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var last uint64
	for i, n := range nodes {
		r, err := n.Submit(ctx, testutil.Put(fmt.Sprintf("new-%d", i)), WaitSigned)
		if err != nil {
			t.Fatalf("submit on %s: %v", n.ID(), err)
		}
		last = max(last, r.Seq)
	}
	testutil.WaitFor(t, 10*time.Second, "every replica at the last seq", func() bool {
		for _, n := range nodes {
			if n.State().Head.Seq < last {
				return false
			}
		}
		return true
	})
	raws := chainOfNode(t, nodes[0])
	if err := chain.VerifyChain(raws, key.DID()); err != nil {
		t.Fatal(err)
	}
	if got := len(opIDs(t, raws)); got != 3 {
		t.Fatalf("%d ops in the chain, want 3", got)
	}
	if _, err := nodes[0].Members(); err == nil {
		t.Fatal("Members on a node without libp2p membership")
	}
}

// TestHandlersWaitForStart: a network serves from the moment New builds it, before the
// lease, the loop and the rest of the node exist. A call that arrives then waits until
// the node is started, or fails at its deadline. Before, it ran at once, reading
// fields New was still writing: under -race, the simulator's seed 215 (a device
// restarting while another forwarded it a submission: Loop.Add read the lease
// election.New was writing) failed the -race run of CI on 2026-12-03.
func TestHandlersWaitForStart(t *testing.T) {
	key := testutil.Key(t, 7)
	_, trans := raft.NewInmemTransport("dev-a")
	var during error
	started := make(chan Handlers, 1)
	net := func(r *raft.Raft, h Handlers) (Network, error) {
		// A member's call while New is still assembling the node.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, during = h.Call(ctx, "dev-b", []byte{callDigests})
		started <- h
		return &memEnd{net: &memNet{handlers: map[string]Handlers{}, rafts: map[string]*raft.Raft{"dev-a": r}}, id: "dev-a"}, nil
	}
	cfg := Config{DataDir: t.TempDir(), ChainKey: key, Bootstrap: true, TTL: nodeTTL, Tick: nodeTick,
		Logger: testutil.Logger(t), Raft: testutil.FastRaft}
	n, err := New(cfg, Parts{ID: "dev-a", Raft: trans, Net: net})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Kill() })
	if !errors.Is(during, context.DeadlineExceeded) {
		t.Fatalf("a call during New answered %v, want it to wait (context.DeadlineExceeded)", during)
	}
	h := <-started
	if out, err := h.Call(context.Background(), "dev-b", []byte{callDigests}); err != nil || len(out) == 0 {
		t.Fatalf("a call once started: %q %v", out, err)
	}
}
