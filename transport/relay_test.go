package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Two members that cannot dial each other (each publishes only an address nobody
// listens on, as behind a NAT) reach each other through the third, a member relay:
// they hold reservations on it, status shows the path as relayed through it, and
// Raft (heartbeats, a 300 KiB entry, beyond libp2p's default 128 KiB relay limit)
// and forwarding run over the relayed connection.
func TestRelayedMembers(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newNode(t, psk)
	if err := a.cluster.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, psk: psk, nodes: []*node{a}}
	tc.leader(tc.nodes)
	token := []byte("join-token-relay")
	a.host.AllowJoins(token, time.Now().Add(time.Minute), 2)
	natd := func(n *node) { n.advertise = []string{"/ip4/127.0.0.1/tcp/1"} } // nobody listens there
	b, c := newNodeWith(t, psk, natd), newNodeWith(t, psk, natd)
	for _, n := range []*node{b, c} {
		if err := n.cluster.Join(ctxTimeout(t, patient), []peer.AddrInfo{a.info()}, token, false); err != nil {
			t.Fatalf("join: %v", err)
		}
		tc.nodes = append(tc.nodes, n)
	}
	relayed := func(from, to *node) bool {
		ps, err := from.cluster.Peers()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ID == to.id() {
				return p.Answering && p.Path == PathRelayed && p.Relay == a.id()
			}
		}
		return false
	}
	waitFor(t, 30*time.Second, "b and c reach each other through a", func() bool {
		return relayed(b, c) && relayed(c, b)
	})
	for _, n := range []*node{b, c} {
		if rs := n.host.Relays(); len(rs) != 1 || rs[0] != a.id() {
			t.Fatalf("%s holds reservations on %v, want a only", n.id(), rs)
		}
	}

	// b leads: Raft between b and c runs through a's relay only.
	for tc.leader(tc.nodes) != b {
		l := tc.leader(tc.nodes)
		_ = l.raft.LeadershipTransferToServer(raft.ServerID(b.id().String()), raft.ServerAddress(b.id().String())).Error()
	}
	big := bytes.Repeat([]byte("x"), 300<<10)
	if _, err := c.cluster.Propose(ctxTimeout(t, patient), big); err != nil {
		t.Fatalf("300 KiB proposal forwarded c -> b through the relay: %v", err)
	}
	waitApplied(t, tc.nodes, big)
	if !relayed(b, c) {
		t.Fatal("b and c no longer relayed (a direct connection appeared)")
	}
}
