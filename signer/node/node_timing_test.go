package node

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The default Raft timing: timeouts TTL/5 within 1-5 s, CommitTimeout a quarter of
// that and at most TTL/10 (a renewal reaches a standby well inside its half TTL).
func TestRaftTimeouts(t *testing.T) {
	for _, tc := range []struct{ ttl, timeout, commit time.Duration }{
		{time.Second, time.Second, 100 * time.Millisecond},
		{2 * time.Second, time.Second, 200 * time.Millisecond},
		{15 * time.Second, 3 * time.Second, 750 * time.Millisecond},
		{time.Minute, 5 * time.Second, 1250 * time.Millisecond},
	} {
		c := raft.DefaultConfig()
		RaftTimeouts(tc.ttl)(c)
		if c.HeartbeatTimeout != tc.timeout || c.ElectionTimeout != tc.timeout || c.LeaderLeaseTimeout != tc.timeout/2 || c.CommitTimeout != tc.commit {
			t.Errorf("ttl %s: heartbeat %s election %s lease %s commit %s", tc.ttl, c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout)
		}
		if 2*c.CommitTimeout > tc.ttl/5 {
			t.Errorf("ttl %s: a renewal may reach a standby %s late", tc.ttl, 2*c.CommitTimeout)
		}
	}
}
