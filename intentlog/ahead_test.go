package intentlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/internal/knobs"
)

// The leader sends a batch ahead to its followers while it writes it (ahead.go): the
// followers store the entries while the leader's own write is held back. Without it
// (knobs.Intentlog.NoSendAhead, hashicorp/raft's order) no follower can store an
// entry before the leader has written it.
func TestFollowersStoreAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		off   bool
		wait  time.Duration
		ahead bool // want: every follower stored the batch while the leader's write was held
	}{
		{"ahead", false, 5 * time.Second, true},
		{"raft's order", true, 300 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *testCluster
			var armed atomic.Bool
			var held, storedFirst atomic.Int64 // batches held; of those, stored by every follower first
			hook := func(first, last uint64) {
				if !armed.Load() {
					return
				}
				held.Add(1)
				deadline := time.Now().Add(tc.wait)
				for time.Now().Before(deadline) {
					all := true
					for _, nd := range c.nodes {
						if nd.log.raft.State() == raft.Follower && nd.log.raft.LastIndex() < last {
							all = false
						}
					}
					if all {
						storedFirst.Add(1)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			// The answers to the entries sent ahead come late, so Raft's own
			// replication can commit an intent while they are in flight (as on a
			// loaded machine): a batch that finds one in flight is not sent ahead.
			c = newClusterWrapped(t, 3, func(cfg *Config) {
				cfg.Knobs = &knobs.Intentlog{NoSendAhead: tc.off, BeforeLeaderStore: hook}
			}, func(_ int, tr *raft.InmemTransport) raft.Transport {
				return lateAnswers{InmemTransport: tr, delay: 50 * time.Millisecond}
			})
			res := c.propose(one(put("a", "c/a", "v")))
			appliedEverywhere(t, c, "the first intent", res.Index)
			armed.Store(true)
			for i := range 3 {
				// A batch goes ahead to a follower that acknowledged the one before
				// and has none in flight: wait for both, then hold the next.
				aheadIdle(t, c, res.Index)
				res = c.propose(one(put(fmt.Sprintf("b%d", i), fmt.Sprintf("c/b%d", i), "v")))
				if !res.Accepted {
					t.Fatalf("intent %d: %+v", i, res)
				}
			}
			armed.Store(false)
			appliedEverywhere(t, c, "the last intent", res.Index)
			got := storedFirst.Load() == held.Load() && held.Load() > 0
			if got != tc.ahead {
				t.Fatalf("%d of %d batches stored by every follower while the leader's write was held; want all: %v", storedFirst.Load(), held.Load(), tc.ahead)
			}
		})
	}
}

// Raft's replication counts a follower on its answer to the entries sent ahead: with
// the answers to every AppendEntries Raft's replication pipelines held back, an intent
// still commits (its batch went ahead, and the followers' answers to that count). In
// Raft's order (knobs.Intentlog.NoSendAhead) it waits for the held answers.
func TestReplicationAnsweredAhead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		off    bool
		commit bool // want: committed while the pipelines' answers are held
	}{
		{"ahead", false, true},
		{"raft's order", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hold atomic.Pointer[chan struct{}]
			c := newClusterWrapped(t, 3, func(cfg *Config) {
				cfg.Knobs = &knobs.Intentlog{NoSendAhead: tc.off}
			}, func(_ int, tr *raft.InmemTransport) raft.Transport {
				return heldAnswers{InmemTransport: tr, hold: &hold}
			})
			res := c.propose(one(put("a", "c/a", "v")))
			appliedEverywhere(t, c, "the first intent", res.Index) // every follower acknowledged in this term
			release := make(chan struct{})
			hold.Store(&release)
			// The commit needs no answer held here: a long deadline costs nothing
			// when it comes, and keeps a loaded machine from failing the test. In
			// Raft's order it cannot come before the release: the deadline passes.
			wait := 10 * time.Second
			if !tc.commit {
				wait = time.Second
			}
			ld := c.leader()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			res, err := ld.log.Propose(ctx, one(put("b", "c/b", "v")))
			cancel()
			hold.Store(nil)
			close(release)
			switch {
			case tc.commit && err != nil:
				t.Fatalf("with Raft's answers held, the intent sent ahead did not commit: %v", err)
			case tc.commit && !res.Accepted:
				t.Fatalf("intent: %+v", res)
			case !tc.commit && !errors.Is(err, ErrTimeout):
				t.Fatalf("in Raft's order, with its answers held: %+v, %v; want %v", res, err, ErrTimeout)
			}
			res = c.propose(one(put("c", "c/c", "v")))
			appliedEverywhere(t, c, "the last intent", res.Index)
		})
	}
}

// aheadIdle waits until the leader has noted, from every follower, an acknowledgement
// in its term of index and has no entries sent ahead in flight.
func aheadIdle(t *testing.T, c *testCluster, index uint64) {
	t.Helper()
	waitWithin(t, 5*time.Second, fmt.Sprintf("every follower's acknowledgement of %d noted, nothing sent ahead in flight", index), func() bool {
		ld := c.leader().log
		n, term := ld.notices, ld.raft.CurrentTerm()
		n.mu.Lock()
		defer n.mu.Unlock()
		acked := 0
		for _, a := range n.acks {
			if a.term == term && a.index >= index {
				acked++
			}
		}
		return acked == len(c.nodes)-1 && len(n.busy) == 0
	})
}

// lateAnswers is a transport whose AppendEntries outside a pipeline that carry entries
// (the entries sent ahead, and Raft's replication before its pipeline starts) pass
// their answer on delay late.
type lateAnswers struct {
	*raft.InmemTransport
	delay time.Duration
}

func (l lateAnswers) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := l.InmemTransport.AppendEntries(id, target, args, resp)
	if len(args.Entries) > 0 {
		time.Sleep(l.delay)
	}
	return err
}

// heldAnswers is a transport whose pipelines pass their answers on only while hold is
// nil, or once the channel it points to is closed.
type heldAnswers struct {
	*raft.InmemTransport
	hold *atomic.Pointer[chan struct{}]
}

func (h heldAnswers) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := h.InmemTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	hp := &heldPipeline{AppendPipeline: p, hold: h.hold, out: make(chan raft.AppendFuture), done: make(chan struct{})}
	go hp.run()
	return hp, nil
}

type heldPipeline struct {
	raft.AppendPipeline
	hold *atomic.Pointer[chan struct{}]
	out  chan raft.AppendFuture
	done chan struct{}
	once sync.Once
}

func (p *heldPipeline) run() {
	for {
		select {
		case f := <-p.AppendPipeline.Consumer():
			if ch := p.hold.Load(); ch != nil {
				select {
				case <-*ch:
				case <-p.done:
					return
				}
			}
			select {
			case p.out <- f:
			case <-p.done:
				return
			}
		case <-p.done:
			return
		}
	}
}

func (p *heldPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

func (p *heldPipeline) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.AppendPipeline.Close()
}
