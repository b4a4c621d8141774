package main

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// fakeExecNode is a node whose lease another device holds (moveTo moves it between
// other devices) until handOver (a `lease transfer --to` this device); from then on
// this device holds it and renews it every half TTL until stall. Its may-sign window
// closes 2/3 TTL after the last renewal. The watch stream's first line comes latency
// after it is asked for (the API's).
type fakeExecNode struct {
	ttl     time.Duration
	latency time.Duration

	mu       sync.Mutex
	other    string        // the holder while another device holds it
	epoch    uint64        // the epoch while another device holds it
	moved    chan struct{} // closed (and replaced) when other changes
	heldAt   time.Time     // zero: another device holds the lease
	stallAt  time.Time     // zero: renewing
	handed   chan struct{}
	released bool
}

func newFakeExecNode(ttl time.Duration) *fakeExecNode {
	return &fakeExecNode{ttl: ttl, latency: 50 * time.Millisecond, other: "12D3KooWother", epoch: 1,
		moved: make(chan struct{}), handed: make(chan struct{})}
}

func (n *fakeExecNode) moveTo(holder string) {
	n.mu.Lock()
	n.other = holder
	n.epoch++
	close(n.moved)
	n.moved = make(chan struct{})
	n.mu.Unlock()
}

func (n *fakeExecNode) handOver() {
	n.mu.Lock()
	n.heldAt = time.Now()
	n.epoch++
	n.mu.Unlock()
	close(n.handed)
}

func (n *fakeExecNode) stall() {
	n.mu.Lock()
	n.stallAt = time.Now()
	n.mu.Unlock()
}

// lease is this device's view now.
func (n *fakeExecNode) lease() node.LeaseState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.heldAt.IsZero() || n.released {
		return node.LeaseState{Holder: n.other, Epoch: n.epoch, TTLMs: n.ttl.Milliseconds(), ExpiresInMs: n.ttl.Milliseconds()}
	}
	now := time.Now()
	if !n.stallAt.IsZero() {
		now = n.stallAt
	}
	half := n.ttl / 2
	renewed := n.heldAt.Add(now.Sub(n.heldAt) / half * half)
	left := renewed.Add(n.ttl * 2 / 3).Sub(time.Now())
	return node.LeaseState{Holder: "12D3KooWself", Epoch: n.epoch, TTLMs: n.ttl.Milliseconds(), ExpiresInMs: max(left.Milliseconds(), 0), HeldByMe: left > 0}
}

func (n *fakeExecNode) State(ctx context.Context) (node.State, error) {
	return node.State{ID: "12D3KooWself", Signer: true, Lease: n.lease()}, nil
}

func (n *fakeExecNode) Campaign(ctx context.Context) (node.LeaseState, error) {
	select {
	case <-n.handed:
		return n.lease(), nil
	case <-ctx.Done():
		return node.LeaseState{}, ctx.Err()
	}
}

// WatchLease sends the current lease after latency; then, while another device holds
// it, each move ("transfer"), and the claim once it is handed over; then a renewal
// every half TTL while this device renews.
func (n *fakeExecNode) WatchLease(ctx context.Context, renewals bool) (<-chan node.LeaseChange, <-chan error) {
	ch, errc := make(chan node.LeaseChange), make(chan error, 1)
	send := func(event string) bool {
		l := n.lease()
		select {
		case ch <- node.LeaseChange{Event: event, Holder: l.Holder, Epoch: l.Epoch, TTLMs: l.TTLMs, HeldByMe: l.HeldByMe, ExpiresInMs: l.ExpiresInMs, At: time.Now()}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(ch)
		defer func() { errc <- ctx.Err() }()
		select {
		case <-time.After(n.latency):
		case <-ctx.Done():
			return
		}
		if !send("current") {
			return
		}
		for {
			n.mu.Lock()
			moved, held := n.moved, !n.heldAt.IsZero()
			n.mu.Unlock()
			if held {
				break
			}
			select {
			case <-moved:
				if !send("transfer") {
					return
				}
			case <-n.handed:
				if !send("claim") {
					return
				}
			case <-ctx.Done():
				return
			}
		}
		n.mu.Lock()
		heldAt := n.heldAt
		n.mu.Unlock()
		half := n.ttl / 2
		for next := heldAt.Add((time.Since(heldAt)/half + 1) * half); ; next = next.Add(half) {
			select {
			case <-time.After(time.Until(next)):
			case <-ctx.Done():
				return
			}
			n.mu.Lock()
			stalled := !n.stallAt.IsZero()
			n.mu.Unlock()
			if !stalled && !send("renew") {
				return
			}
		}
	}()
	return ch, errc
}

func (n *fakeExecNode) Release(ctx context.Context) error {
	n.mu.Lock()
	n.released = true
	n.mu.Unlock()
	return nil
}

// While exec (or lease campaign) waits, it says each time the lease moves to another
// holder (issue 39.2: "waiting, the standby never updates who holds the lease"), and
// says nothing of this device's own claim.
func TestCampaignSaysWhereTheLeaseMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeExecNode(5 * time.Second)
		var errs syncBuffer
		c := &cli{stdout: io.Discard, stderr: &errs, getenv: func(string) string { return "" }}
		f := &apiFlags{data: new(string), api: new(string), tokenFile: new(string), getenv: c.getenv}
		done := make(chan error, 1)
		go func() {
			_, err := c.campaign(t.Context(), f, n, 0, "exec")
			done <- err
		}()
		time.Sleep(2 * time.Second)
		n.moveTo("12D3KooWthird7777")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !strings.Contains(errs.String(), "still waiting: the lease is now held by …rd7777 at epoch 2 (transfer)") {
			t.Errorf("no line for the move while waiting:\n%s", errs.String())
		}
		n.handOver()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if lines := strings.Count(errs.String(), "\n"); lines != 2 {
			t.Errorf("%d lines on stderr, want the first and the move's:\n%s", lines, errs.String())
		}
	})
}

// exec on a standby that waited for the lease (issue 39: TTL 5 s, `baton exec` waiting,
// then `lease transfer --to` it): the hold it gets is followed from when it got it.
// Before, the may-sign window was counted from when exec started waiting, so after a
// wait longer than the window it had closed already, and exec stopped its command
// within milliseconds of the claim, while the device held the lease. Virtual time
// (synctest): the wait, the renewals and the window are the fake node's.
func TestExecHoldAfterAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 5 * time.Second
		n := newFakeExecNode(ttl)
		c := &cli{stdin: nil, stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
		f := &apiFlags{data: new(string), api: new(string), tokenFile: new(string), getenv: c.getenv}
		type acquired struct {
			h   *execHold
			err error
		}
		got := make(chan acquired, 1)
		go func() {
			h, err := c.acquire(t.Context(), f, n, 0)
			got <- acquired{h, err}
		}()
		time.Sleep(5 * time.Second) // the standby waits: another device holds the lease
		n.handOver()
		a := <-got
		if a.err != nil {
			t.Fatal(a.err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		ended := make(chan string, 1)
		go func() { ended <- a.h.watch(ctx) }()

		// Held and renewed for six TTLs: the hold goes on.
		time.Sleep(6 * ttl)
		select {
		case why := <-ended:
			t.Fatalf("the hold ended while this device held the lease and renewed it: %s", why)
		default:
		}

		// This device stops renewing (a stalled node): the hold ends within the
		// may-sign window of the last renewal.
		n.stall()
		stalled := time.Now()
		why := <-ended
		if took := time.Since(stalled); took > ttl*2/3 {
			t.Fatalf("the hold ended %v after the last renewal (%q), want within 2/3 TTL", took, why)
		}
		t.Logf("after the stall: %s", why)
	})
}
