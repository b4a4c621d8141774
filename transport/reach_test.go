package transport

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// A connection that stops carrying anything without either end being told (a
// laptop that left its network, a NAT that forgot the mapping) fails the probes, and
// is closed after silentAfter so that the next probe dials again. Before, libp2p's
// ping ending at its deadline read as an answer with RTT 0 (its channel closes
// without a result): the member looked reachable, and the dead connection stayed
// until yamux's keepalive (30 s and more) while nothing was dialled.
func TestProbeClosesASilentConnection(t *testing.T) {
	psk, err := GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	b := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	t.Cleanup(func() { _ = b.Close() })
	f := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	t.Cleanup(func() { _ = f.Close() })
	px := newFreezeProxy(t, manet(t, f.Addrs()[0]))
	viaProxy := peer.AddrInfo{ID: f.ID(), Addrs: []ma.Multiaddr{px.addr()}}
	f.AllowPeer(peer.AddrInfo{ID: b.ID()})
	if err := b.AddMember(viaProxy); err != nil {
		t.Fatal(err)
	}
	mustConnect(t, b, viaProxy)
	waitFor(t, 5*time.Second, "a probe answered", func() bool {
		st := b.probeOf(f.ID())
		return st.probed && st.ok && st.rtt > 0
	})
	conns := b.h.Network().ConnsToPeer(f.ID())
	if len(conns) == 0 {
		t.Fatal("no connection")
	}
	// The silence is counted from the last answer (or anything heard), which may
	// come up to a probe interval before the freeze: measure from the last answer
	// seen now (a later one only closes it later).
	lastOK := b.probeOf(f.ID()).lastOK
	px.Freeze()
	waitFor(t, 4*time.Second, "the probe of a frozen connection to fail", func() bool {
		return !b.probeOf(f.ID()).ok
	})
	waitFor(t, b.silentAfter()+4*time.Second, "the silent connection closed", func() bool {
		for _, c := range conns {
			if !c.IsClosed() {
				return false
			}
		}
		return true
	})
	if took := time.Since(lastOK); took < b.silentAfter() {
		t.Fatalf("closed %v after the last answer, before silentAfter (%v)", took, b.silentAfter())
	}
}
