package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Two members that cannot dial each other (each publishes only an address nobody
// listens on, as behind a NAT) reach each other through the third, a member relay:
// they hold reservations on it, status shows the path as relayed through it, and
// Raft (heartbeats, a 300 KiB entry, beyond libp2p's default 128 KiB relay limit)
// and forwarding run over the relayed connection.
func TestRelayedMembers(t *testing.T) {
	_, tc, a, b, c := relayedTrio(t)
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

// A device that is not a member reaches a member behind a NAT through a relay member
// only while that member's join window is open (it tells its relays when it opens
// and closes), and only that member: the relay refuses it otherwise, and refuses it
// a circuit to any other member (before: always refused, so an invite from a member
// behind a NAT could not be used).
func TestRelayWindow(t *testing.T) {
	psk, _, a, b, c := relayedTrio(t)
	a.host.CloseJoin() // a's own window would admit anyone with the key
	waitFor(t, 30*time.Second, "b and c hold reservations on a", func() bool {
		return len(b.host.Relays()) == 1 && len(c.host.Relays()) == 1
	})
	var aTCP ma.Multiaddr
	for _, la := range a.host.h.Network().ListenAddresses() {
		if _, err := la.ValueForProtocol(ma.P_TCP); err == nil {
			aTCP = la
		}
	}
	via := func(to *node) peer.AddrInfo {
		circuit := ma.StringCast("/p2p/" + a.id().String() + "/p2p-circuit")
		return peer.AddrInfo{ID: to.id(), Addrs: []ma.Multiaddr{aTCP.Encapsulate(circuit)}}
	}
	d := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	t.Cleanup(func() { _ = d.Close() })
	connect := func(to *node) error {
		_ = d.h.Network().ClosePeer(a.id())
		return d.Connect(ctxTimeout(t, 3*time.Second), via(to))
	}
	if err := connect(b); err == nil {
		t.Fatal("a relayed a device that is not a member to b with no join window open")
	}
	b.host.AllowJoin([]byte("join-token-b-window"), time.Now().Add(time.Minute))
	if !a.host.gater.relayWins.openFor(b.id(), time.Now()) {
		t.Fatal("a did not hear of b's join window")
	}
	if err := connect(b); err != nil {
		t.Fatalf("through a to b during b's join window: %v", err)
	}
	if err := connect(c); err == nil {
		t.Fatal("a relayed a device that is not a member to c, whose window is closed")
	}
	b.host.CloseJoin()
	if a.host.gater.relayWins.openFor(b.id(), time.Now()) {
		t.Fatal("b's window still open at a after b closed it")
	}
	_ = d.h.Network().ClosePeer(b.id())
	if err := connect(b); err == nil {
		t.Fatal("a relayed a device that is not a member to b after b closed its window")
	}
}

// A direct connection (hole-punched, say) that dies while the member is still heard
// from through a relay is closed: libp2p opens every new stream (pings, Raft) on the
// direct connection while there is one, so it would swallow them until yamux's
// keepalive. Here b reaches c both through a and over a direct connection through a
// proxy that then freezes; b keeps hearing from c (as Raft would, over the relay).
func TestDeadDirectBesideRelayClosed(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newNode(t, psk)
	if err := a.cluster.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, psk: psk, nodes: []*node{a}}
	tc.leader(tc.nodes)
	token := []byte("join-token-relay")
	a.host.AllowJoins(token, time.Now().Add(time.Minute), 2)
	b := newNodeWith(t, psk, func(n *node) { n.advertise = []string{"/ip4/127.0.0.1/tcp/1"} })
	// c does not probe (its own silence rule would close its end of both paths).
	c := newNodeWith(t, psk, func(n *node) { n.advertise = []string{"/ip4/127.0.0.1/tcp/1"}; n.probe = time.Hour })
	for _, n := range []*node{b, c} {
		if err := n.cluster.Join(ctxTimeout(t, patient), []peer.AddrInfo{a.info()}, token, false); err != nil {
			t.Fatalf("join: %v", err)
		}
		tc.nodes = append(tc.nodes, n)
	}
	waitFor(t, 30*time.Second, "b reaches c through a", func() bool {
		path, relay := b.host.pathTo(c.id())
		return path == PathRelayed && relay == a.id()
	})
	var cTCP ma.Multiaddr
	for _, la := range c.host.h.Network().ListenAddresses() {
		if _, err := la.ValueForProtocol(ma.P_TCP); err == nil {
			cTCP = la
		}
	}
	px := newFreezeProxy(t, manet(t, cTCP))
	ctx := network.WithForceDirectDial(ctxTimeout(t, 5*time.Second), "test: a direct connection beside the relayed one")
	// libp2p's Connect would add px with TempAddrTTL, which identify messages from c
	// (over the relay) expire: add it as Host.Connect does.
	b.host.addDialAddrs(c.id(), []ma.Multiaddr{px.addr()})
	if err := b.host.h.Connect(ctx, peer.AddrInfo{ID: c.id()}); err != nil {
		t.Fatalf("direct connection through the proxy: %v", err)
	}
	var direct []network.Conn
	for _, conn := range b.host.h.Network().ConnsToPeer(c.id()) {
		if _, relayed := relayOf(conn.RemoteMultiaddr()); !relayed {
			direct = append(direct, conn)
		}
	}
	if len(direct) == 0 || len(b.host.h.Network().ConnsToPeer(c.id())) == len(direct) {
		t.Fatalf("want a direct and a relayed connection, have %d direct of %d", len(direct), len(b.host.h.Network().ConnsToPeer(c.id())))
	}
	waitFor(t, 5*time.Second, "a probe answered over the direct connection", func() bool {
		st := b.host.probeOf(c.id())
		return st.ok && st.path == PathDirect && time.Since(st.lastOK) < time.Second
	})
	px.Freeze()
	frozen := time.Now()
	heard, touched := make(chan struct{}), make(chan struct{})
	bh, cid := b.host, c.id()
	go func() {
		defer close(touched)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-heard:
				return
			case <-tk.C:
				bh.touch(cid) // c heard from over the relay, as Raft would be
			}
		}
	}()
	// The toucher is gone before the nodes' cleanup stops them (CI's -race saw it
	// read b.host while b.stop cleared it).
	defer func() { close(heard); <-touched }()
	defer func() {
		st := b.host.probeOf(c.id())
		t.Logf("probe: ok %v path %s lastOK %v ago err %q inflight %v; conns %d", st.ok, st.path, time.Since(st.lastOK), st.err, st.inflight, len(b.host.h.Network().ConnsToPeer(c.id())))
	}()
	// Heard from, b pings c only every rttEvery intervals: the first ping into the
	// frozen connection may start that late.
	waitFor(t, b.host.silentAfter()+rttEvery*b.host.cfg.ProbeInterval+5*time.Second, "the dead direct connection closed", func() bool {
		for _, conn := range direct {
			if !conn.IsClosed() {
				return false
			}
		}
		return true
	})
	if took := time.Since(frozen); took < b.host.silentAfter() {
		t.Fatalf("closed after %v, before silentAfter", took)
	}
	waitFor(t, 10*time.Second, "b's probes of c answered again, through a", func() bool {
		st := b.host.probeOf(c.id())
		return st.ok && st.path == PathRelayed && time.Since(st.lastOK) < 2*time.Second
	})
}

// relayedTrio starts member a (bootstrapped, leading) and joins b and c, which
// advertise only an address nobody listens on (as behind a NAT), so that they reach
// each other through a only.
func relayedTrio(t *testing.T) (psk []byte, tc *testCluster, a, b, c *node) {
	t.Helper()
	psk, _ = GeneratePSK()
	a = newNode(t, psk)
	if err := a.cluster.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	tc = &testCluster{t: t, psk: psk, nodes: []*node{a}}
	tc.leader(tc.nodes)
	token := []byte("join-token-relay")
	a.host.AllowJoins(token, time.Now().Add(time.Minute), 2)
	natd := func(n *node) { n.advertise = []string{"/ip4/127.0.0.1/tcp/1"} } // nobody listens there
	b, c = newNodeWith(t, psk, natd), newNodeWith(t, psk, natd)
	for _, n := range []*node{b, c} {
		if err := n.cluster.Join(ctxTimeout(t, patient), []peer.AddrInfo{a.info()}, token, false); err != nil {
			t.Fatalf("join: %v", err)
		}
		tc.nodes = append(tc.nodes, n)
	}
	return psk, tc, a, b, c
}
