package transport

import (
	"fmt"
	"testing"
	"time"
)

// The leader pipelines entries to a follower that froze (its connection open, nothing
// read or answered: SIGSTOP); raft.Shutdown on the leader must still return within a
// few seconds, although raft's own I/O deadline (DefaultRaftTimeout) is 10 s. Before
// the stream layer ended its streams at Shutdown, it took about 20 s: raft waits for
// every replication goroutine, each held by a read or write deadline in turn.
//
// With raft's default pipeline depth the replication goroutine waits for answers;
// with a deeper one it also fills the yamux window and blocks in a write.
func TestShutdownWithFrozenFollower(t *testing.T) {
	for _, tt := range []struct {
		name     string
		inFlight int // RaftTransportConfig.MaxRPCsInFlight
	}{
		{"awaiting answers", 0},
		{"window full", 32},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc, f, px, _ := newFrozenCluster(t, func(n *node) {
				n.rtweak = func(c *RaftTransportConfig) {
					c.Timeout = DefaultRaftTimeout
					c.MaxRPCsInFlight = tt.inFlight
				}
			}, false)
			leader := tc.leader(tc.nodes)
			if _, err := leader.cluster.Propose(ctxTimeout(t, patient), []byte("before")); err != nil {
				t.Fatal(err)
			}
			waitApplied(t, tc.nodes, []byte("before"))
			px.Freeze()
			defer px.Thaw()
			big := make([]byte, 64<<10)
			for i := range 48 { // 3 MiB, committed with the live follower
				if _, err := leader.cluster.Propose(ctxTimeout(t, patient), fmt.Appendf(nil, "%d:%s", i, big)); err != nil {
					t.Fatalf("propose with a frozen follower: %v", err)
				}
			}
			if tt.inFlight > 0 {
				waitBlockedWrite(t, leader, f)
			}
			start := time.Now()
			done := make(chan struct{})
			go func() {
				_ = leader.raft.Shutdown().Error()
				close(done)
			}()
			select {
			case <-done:
				t.Logf("leader's raft.Shutdown returned after %v with a frozen follower", time.Since(start).Round(time.Millisecond))
			case <-time.After(3 * time.Second):
				<-done
				t.Fatalf("leader's raft.Shutdown took %v with a frozen follower", time.Since(start).Round(time.Millisecond))
			}
			// The rest of a graceful stop (store and host) is bounded too.
			start = time.Now()
			leader.stop()
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("closing the leader's host took %v with a frozen follower", took)
			}
		})
	}
}
