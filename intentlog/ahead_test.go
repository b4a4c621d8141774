package intentlog

import (
	"fmt"
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
			c = newCluster(t, 3, func(cfg *Config) {
				cfg.Knobs = &knobs.Intentlog{NoSendAhead: tc.off, BeforeLeaderStore: hook}
			})
			res := c.propose(one(put("a", "c/a", "v")))
			appliedEverywhere(t, c, "the first intent", res.Index) // every follower acknowledged in this term
			armed.Store(true)
			for i := range 3 {
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
