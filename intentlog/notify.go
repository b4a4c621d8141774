package intentlog

import (
	"sync"
	"sync/atomic"
)

// Event is what a Subscription delivers: LeaseChanged, CommitApplied, IntentAccepted,
// GenesisApplied or StateRestored.
type Event interface{ isEvent() }

// LeaseChanged: an accepted lease entry (claim, steal, renew, release, transfer) was
// applied at Index; Lease is the lease after it.
type LeaseChanged struct {
	Index uint64
	Event string
	Lease Lease
}

// CommitApplied: a Commit entry was accepted at Index; Head is the new head.
type CommitApplied struct {
	Index uint64
	Head  Head
	Raw   []byte // the commit's full encoding; do not modify
	// Ops are the commit's ops as the apply verified them (what Raw decodes to), so
	// that a subscriber need not decode Raw again; do not modify.
	Ops []Intent
}

// IntentAccepted: an intent was accepted into the pending queue at Index.
type IntentAccepted struct {
	ID    string
	Index uint64
}

// GenesisApplied: a genesis entry was accepted at Genesis.Index.
type GenesisApplied struct {
	Genesis Genesis
}

// StateRestored: the whole state was replaced from a Raft snapshot (a lagging replica
// caught up by snapshot install, or a start-up restore). Events for the entries the
// snapshot covers are not delivered: a subscriber must resync from the Log.
type StateRestored struct {
	AppliedIndex uint64
}

func (LeaseChanged) isEvent()   {}
func (StateRestored) isEvent()  {}
func (CommitApplied) isEvent()  {}
func (IntentAccepted) isEvent() {}
func (GenesisApplied) isEvent() {}

// SubscriptionBuffer is the channel capacity of a Subscription.
const SubscriptionBuffer = 1024

// Subscription delivers typed events after the transaction that produced them has
// committed to disk.
//
// Guarantees: safety, not liveness. Every event delivered is true and events arrive in
// apply order, but the apply never waits for a subscriber: when C is full, events are
// dropped and counted in Lost. A subscriber that sees Lost() grow or receives
// StateRestored must resync from the Log (View, Pending, Commit, LeaseHistory).
type Subscription struct {
	C      <-chan Event
	c      chan Event
	lost   atomic.Uint64
	parent *notifier
	once   sync.Once
}

// Lost returns how many events were dropped because C was full.
func (s *Subscription) Lost() uint64 { return s.lost.Load() }

// Close stops delivery and closes C. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.parent.mu.Lock()
		delete(s.parent.subs, s)
		close(s.c)
		s.parent.mu.Unlock()
	})
}

// notifier fans applied changes out to watchers and subscribers without ever blocking.
type notifier struct {
	mu     sync.Mutex
	watch  chan struct{}
	subs   map[*Subscription]struct{}
	closed bool
}

func newNotifier() *notifier {
	return &notifier{watch: make(chan struct{}), subs: make(map[*Subscription]struct{})}
}

func (n *notifier) watchCh() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.watch
}

func (n *notifier) subscribe() *Subscription {
	c := make(chan Event, SubscriptionBuffer)
	s := &Subscription{C: c, c: c, parent: n}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		s.once.Do(func() { close(c) })
		return s
	}
	n.subs[s] = struct{}{}
	return s
}

// publish wakes every watcher and offers each event to every subscriber.
func (n *notifier) publish(events []Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	close(n.watch)
	n.watch = make(chan struct{})
	for s := range n.subs {
		for _, ev := range events {
			select {
			case s.c <- ev:
			default:
				s.lost.Add(1)
			}
		}
	}
}

// close closes every subscription (on Log.Close) and wakes watchers for good.
func (n *notifier) close() {
	n.mu.Lock()
	subs := make([]*Subscription, 0, len(n.subs))
	for s := range n.subs {
		subs = append(subs, s)
	}
	if !n.closed {
		n.closed = true
		close(n.watch) // stays closed: Watch after Close returns at once
	}
	n.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
}
