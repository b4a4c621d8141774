package transport

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

var errBoom = errors.New("boom")

// A follower's Barrier reaches the leader's barrier function and returns an index
// past everything committed before the call; errors come back as Propose's do.
func TestBarrier(t *testing.T) {
	var mode atomic.Int32 // 0: raft barrier, 1: fail, 2: "not leader" forever
	tc := newTestClusterWith(t, 3, func(n *node) {
		n.ctweak = func(n *node, cfg *ClusterConfig) {
			cfg.Barrier = func(ctx context.Context) (uint64, error) {
				switch mode.Load() {
				case 1:
					return 0, errBoom
				case 2:
					return 0, ErrNotLeader
				}
				return raftBarrier(n.raft)(ctx)
			}
		}
	})
	leader := tc.leader(tc.nodes)
	fol := tc.followers(leader)[0]

	if _, err := fol.cluster.Propose(ctxTimeout(t, patient), []byte("before-barrier")); err != nil {
		t.Fatal(err)
	}
	committed := leader.raft.AppliedIndex() // the proposal has been applied on the leader
	idx, err := fol.cluster.Barrier(ctxTimeout(t, patient))
	if err != nil {
		t.Fatalf("barrier from a follower: %v", err)
	}
	if idx <= committed {
		t.Fatalf("barrier index %d, want past %d (the barrier is an entry of its own)", idx, committed)
	}
	lidx, err := leader.cluster.Barrier(ctxTimeout(t, patient))
	if err != nil || lidx <= idx {
		t.Fatalf("barrier on the leader: %d, %v (want past %d)", lidx, err, idx)
	}

	mode.Store(1)
	_, err = fol.cluster.Barrier(ctxTimeout(t, patient))
	var re *RemoteError
	if !errors.As(err, &re) || re.Msg != "boom" || re.Peer != leader.id().String() || re.Call {
		t.Fatalf("follower barrier with a failing leader: got %v, want RemoteError boom", err)
	}
	if _, err := leader.cluster.Barrier(ctxTimeout(t, patient)); !errors.Is(err, errBoom) {
		t.Fatalf("leader barrier: got %v, want the function's error unchanged", err)
	}

	// A leader whose barrier says "not leader": retried until the deadline, never later.
	mode.Store(2)
	start := time.Now()
	_, err = fol.cluster.Barrier(ctxTimeout(t, 500*time.Millisecond))
	if !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrNoLeader or ErrTimeout", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond+late {
		t.Fatalf("barrier returned %v after a 500ms deadline", took)
	}
}

func TestBarrierWithoutHandler(t *testing.T) {
	tc := newTestClusterWith(t, 2, func(n *node) {
		n.ctweak = func(_ *node, cfg *ClusterConfig) { cfg.Barrier = nil }
	})
	leader := tc.leader(tc.nodes)
	if _, err := tc.followers(leader)[0].cluster.Barrier(ctxTimeout(t, patient)); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("follower: got %v, want ErrNoHandler", err)
	}
	if _, err := leader.cluster.Barrier(ctxTimeout(t, patient)); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("leader: got %v, want ErrNoHandler", err)
	}
}

// A barrier forwarded to a leader that hangs (frozen) is retried at the new leader
// once the live members elect one, within a bound well under the deadline.
func TestBarrierFrozenLeader(t *testing.T) {
	tc, _, px, live := newFrozenLeaderCluster(t)
	if _, err := live[0].cluster.Propose(ctxTimeout(t, patient), []byte("before")); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, tc.nodes, []byte("before"))
	px.Freeze()
	start := time.Now()
	idx, err := live[0].cluster.Barrier(ctxTimeout(t, patient))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("barrier with the leader frozen: %v (after %v)", err, took)
	}
	if took > 5*time.Second { // a barrier held at the frozen leader would wait for the deadline
		t.Fatalf("barrier took %v with the leader frozen", took)
	}
	if idx == 0 {
		t.Fatal("barrier index 0")
	}
	t.Logf("barrier answered by the new leader after %v", took.Round(time.Millisecond))
}

// callHandler is the OnCall of the call tests: "from|payload"; "fail" fails;
// "block" reports its deadline on entered and waits for its context.
func callHandler(entered chan<- time.Duration) func(context.Context, peer.ID, []byte) ([]byte, error) {
	return func(ctx context.Context, from peer.ID, p []byte) ([]byte, error) {
		switch string(p) {
		case "fail":
			return nil, fmt.Errorf("handler says no: %w", ErrNotLeader) // must not look like the transport's
		case "block":
			dl, ok := ctx.Deadline()
			left := time.Duration(-1)
			if ok {
				left = time.Until(dl)
			}
			select {
			case entered <- left:
			default:
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return []byte(from.String() + "|" + string(p)), nil
	}
}

func TestCall(t *testing.T) {
	entered := make(chan time.Duration, 1)
	var idx atomic.Int32
	tc := newTestClusterWith(t, 3, func(n *node) {
		withHandler := idx.Add(1) != 3 // the third node has no OnCall
		n.ctweak = func(_ *node, cfg *ClusterConfig) {
			if withHandler {
				cfg.OnCall = callHandler(entered)
			}
		}
	})
	a, b, noHandler := tc.nodes[0], tc.nodes[1], tc.nodes[2]

	res, err := a.cluster.Call(ctxTimeout(t, patient), b.id(), []byte("hi"))
	if err != nil || string(res) != a.id().String()+"|hi" {
		t.Fatalf("call: %q, %v", res, err)
	}
	if res, err := a.cluster.Call(ctxTimeout(t, patient), a.id(), []byte("me")); err != nil || string(res) != a.id().String()+"|me" {
		t.Fatalf("call to self: %q, %v", res, err)
	}

	_, err = a.cluster.Call(ctxTimeout(t, patient), b.id(), []byte("fail"))
	var re *RemoteError
	if !errors.As(err, &re) || !re.Call || re.Peer != b.id().String() || !strings.HasPrefix(re.Msg, "handler says no") {
		t.Fatalf("failing handler: got %v, want RemoteError from the callee", err)
	}
	if errors.Is(err, ErrNotLeader) || !strings.HasPrefix(err.Error(), "peer "+b.id().String()) {
		t.Fatalf("handler error %q keeps an identity or names the leader", err)
	}

	if _, err := a.cluster.Call(ctxTimeout(t, patient), noHandler.id(), []byte("hi")); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("callee without OnCall: got %v, want ErrNoHandler", err)
	}

	// The caller's remaining deadline bounds the handler and the call.
	start := time.Now()
	_, err = a.cluster.Call(ctxTimeout(t, 800*time.Millisecond), b.id(), []byte("block"))
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked handler: got %v, want ErrTimeout", err)
	}
	if took < 800*time.Millisecond || took > 800*time.Millisecond+late {
		t.Fatalf("call with an 800ms deadline returned after %v", took)
	}
	if left := <-entered; left <= 0 || left > 800*time.Millisecond {
		t.Fatalf("handler's deadline %v away, want the caller's remaining time (<= 800ms)", left)
	}

	// A lost connection fails the call at once, not at the deadline.
	errc := make(chan error, 1)
	go func() {
		_, err := a.cluster.Call(ctxTimeout(t, patient), b.id(), []byte("block"))
		errc <- err
	}()
	<-entered
	start = time.Now()
	_ = a.host.h.Network().ClosePeer(b.id())
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, ErrTimeout) {
			t.Fatalf("call over a closed connection: got %v", err)
		}
		t.Logf("connection lost: %v after %v", err, time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("call still waiting 3s after its connection was closed")
	}

	// Only members: locally (a peer not in the membership) and at the callee.
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	stranger, _ := peer.IDFromPrivateKey(key)
	if _, err := a.cluster.Call(ctxTimeout(t, 2*time.Second), stranger, []byte("hi")); !errors.Is(err, ErrNotMember) {
		t.Fatalf("call to a non-member: got %v, want ErrNotMember", err)
	}
	x := newNode(t, tc.psk)
	a.host.AllowJoin([]byte("tok"), time.Now().Add(time.Minute)) // admitted by the gater, not a member
	x.host.AllowPeer(a.info())
	_, err = x.cluster.Call(ctxTimeout(t, patient), a.id(), []byte("hi"))
	if !errors.Is(err, ErrNotMember) || !strings.Contains(err.Error(), "refused by the callee") {
		t.Fatalf("call from a non-member: got %v, want ErrNotMember from the callee", err)
	}

	// A payload over the frame limit is refused before anything is sent.
	if _, err := a.cluster.Call(ctxTimeout(t, 2*time.Second), b.id(), make([]byte, DefaultMaxFrameSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized call: got %v, want ErrTooLarge", err)
	}
}

// A call to a member that hangs with its connection open (SIGSTOP, frozen VM) fails
// by the caller's deadline; once it thaws, calls succeed again.
func TestCallFrozenPeer(t *testing.T) {
	entered := make(chan time.Duration, 1)
	_, f, px, live := newFrozenCluster(t, func(n *node) {
		n.ctweak = func(_ *node, cfg *ClusterConfig) { cfg.OnCall = callHandler(entered) }
	}, false)
	if _, err := live[0].cluster.Call(ctxTimeout(t, patient), f.id(), []byte("hi")); err != nil {
		t.Fatalf("call before the freeze: %v", err)
	}
	px.Freeze()
	for _, d := range []time.Duration{300 * time.Millisecond, time.Second} {
		start := time.Now()
		_, err := live[0].cluster.Call(ctxTimeout(t, d), f.id(), []byte("hi"))
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call to a frozen peer: got %v, want ErrTimeout", err)
		}
		if took > d+late {
			t.Fatalf("call with a %v deadline to a frozen peer returned after %v", d, took)
		}
		t.Logf("frozen callee, %v deadline: returned after %v", d, took.Round(time.Millisecond))
	}
	checkOnlyViaProxy(t, f, px, live)
	px.Thaw()
	waitFor(t, 10*time.Second, "a call to the thawed peer", func() bool {
		res, err := live[0].cluster.Call(ctxTimeout(t, time.Second), f.id(), []byte("again"))
		return err == nil && string(res) == live[0].id().String()+"|again"
	})
}

// A request carries its caller's remaining time rounded up to the millisecond, so
// the callee's deadline is never before the caller's (rounded down, a call returned
// "timeout" 0.3 ms before its 800 ms deadline).
func TestRemainingMSRoundsUp(t *testing.T) {
	now := time.Now()
	for left, want := range map[time.Duration]uint64{
		799*time.Millisecond + 900*time.Microsecond: 800,
		800 * time.Millisecond:                      800,
		800*time.Millisecond + time.Nanosecond:      801,
		time.Microsecond:                            1,
		-time.Second:                                1,
	} {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(left))
		if got := remainingMS(ctx, now); got != want {
			t.Errorf("%v left: %d ms, want %d", left, got, want)
		}
		cancel()
	}
	if got := remainingMS(context.Background(), now); got != 0 {
		t.Errorf("no deadline: %d, want 0", got)
	}
}
