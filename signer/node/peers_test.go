package node

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/internal/testutil"
)

// Each device measures every member's reachability itself (issue 24 item 2): two
// followers exchange nothing at rest, and once the connection between them is gone
// (a NAT dropped its idle mapping, one restarted while the other was down) status
// used to say "unknown (not in contact)" about a healthy member forever.
func TestPeersFollowerToFollower(t *testing.T) {
	psk := testutil.PSK(t)
	key := testutil.Key(t, 7)
	root := t.TempDir()
	cfg := nodeConfig(t, filepath.Join(root, "a"), psk, key)
	cfg.Bootstrap = true
	first := startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "first node leads", func() bool { return first.State().Raft.Role == "Leader" })
	nodes := joinTwo(t, root, psk, key, first)
	var fs []*Node
	for _, n := range nodes {
		if n.State().Raft.Role != "Leader" {
			fs = append(fs, n)
		}
	}
	if len(fs) != 2 {
		t.Fatalf("%d followers, want 2", len(fs))
	}
	a, b := fs[0], fs[1]
	bid, err := peer.Decode(b.ID())
	if err != nil {
		t.Fatal(err)
	}
	// The link between the two followers goes away; neither is down.
	_ = a.Host().LibP2P().Network().ClosePeer(bid)
	view := func() PeerState {
		ps, err := a.Peers()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ID == b.ID() {
				return p
			}
		}
		t.Fatalf("%s missing from %s's peers: %+v", b.ID(), a.ID(), ps)
		return PeerState{}
	}
	testutil.WaitFor(t, 5*time.Second, "the other follower reported reachable, with a round trip", func() bool {
		p := view()
		return p.Reachable && !p.Unknown && p.LastSeenMs >= 0 && p.LastSeenMs < 3000 &&
			p.Path == "direct" && p.RTTMicros > 0 && p.SinceMs >= 0 && p.ProbeError == ""
	})
	t.Logf("follower seen from follower: %+v", view())

	// The other follower dies: reported unreachable (not unknown), with why.
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the dead follower reported unreachable", func() bool {
		p := view()
		return !p.Reachable && !p.Unknown && p.ProbeError != "" && p.Path == ""
	})
	t.Logf("dead follower seen from follower: %+v", view())
}
