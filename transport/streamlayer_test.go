package transport

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func TestStreamLayer(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	b := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer b.Close()
	if err := a.AddMember(b.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddMember(a.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	la := newStreamLayer(a, RaftProtocol)
	lb := newStreamLayer(b, RaftProtocol)
	defer la.Close()
	if got := la.Addr().String(); got != a.ID().String() {
		t.Fatalf("Addr %q, want the peer ID", got)
	}

	// Dial and Accept carry bytes both ways; addresses are peer IDs.
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := lb.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := la.Dial(raft.ServerAddress(b.ID().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	var s net.Conn
	select {
	case s = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("accept timed out")
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q %v", buf, err)
	}
	if s.RemoteAddr().String() != a.ID().String() || c.RemoteAddr().String() != b.ID().String() {
		t.Fatal("remote addresses are not peer IDs")
	}
	c.Close()
	s.Close()

	// Accept unblocks on Close, and the handler is gone.
	done := make(chan error, 1)
	go func() {
		_, err := lb.Accept()
		done <- err
	}()
	lb.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not unblock on Close")
	}
	for _, p := range b.LibP2P().Mux().Protocols() {
		if p == RaftProtocol {
			t.Fatal("raft stream handler still registered after Close")
		}
	}
	if _, err := lb.Dial(raft.ServerAddress(a.ID().String()), time.Second); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}

	// Dial honours its timeout against an unreachable peer.
	c2 := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	id := c2.ID()
	a.AllowPeer(c2.AddrInfo())
	c2.Close()
	start := time.Now()
	if _, err := la.Dial(raft.ServerAddress(id.String()), 300*time.Millisecond); err == nil {
		t.Fatal("dial to a closed peer succeeded")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("dial took %v with a 300ms timeout", took)
	}

	// A non-member's raft stream is reset.
	x := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer x.Close()
	a.AllowJoin([]byte("tok"), time.Now().Add(time.Minute)) // admitted by the gater, not a member
	lx := newStreamLayer(x, RaftProtocol)
	defer lx.Close()
	x.AllowPeer(a.AddrInfo())
	cx, err := lx.Dial(raft.ServerAddress(a.ID().String()), 2*time.Second)
	if err == nil {
		_, _ = cx.Write([]byte("hello"))
		_ = cx.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := cx.Read(buf); err == nil {
			t.Fatal("a non-member's raft stream was served")
		}
		cx.Close()
	}
}

// Closing a Raft stream to a peer that froze right after the stream was opened (the
// protocol handshake never answered: libp2p's Close waits up to 10 s for it) takes
// about streamCloseTimeout; after abort, Dial is refused and open streams fail at once.
func TestStreamLayerBoundedCloseAndAbort(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	b := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer b.Close()
	px := newFreezeProxy(t, manet(t, b.Addrs()[0]))
	viaProxy := peer.AddrInfo{ID: b.ID(), Addrs: []ma.Multiaddr{px.addr()}}
	if err := a.AddMember(viaProxy); err != nil {
		t.Fatal(err)
	}
	b.AllowPeer(peer.AddrInfo{ID: a.ID()})
	la := newStreamLayer(a, RaftProtocol)
	defer la.Close()
	lb := newStreamLayer(b, RaftProtocol)
	defer lb.Close()
	mustConnect(t, a, viaProxy)
	checkHostViaProxy(t, a, b.ID(), px)

	px.Freeze()
	defer px.Thaw()
	c, err := la.Dial(raft.ServerAddress(b.ID().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("append entries")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.Close()
	if took := time.Since(start); took > streamCloseTimeout+late {
		t.Fatalf("close of a stream to a frozen peer took %v", took)
	} else {
		t.Logf("close of a stream to a frozen peer: %v", took.Round(time.Millisecond))
	}

	c2, err := la.Dial(raft.ServerAddress(b.ID().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := c2.Read(make([]byte, 1))
		readErr <- err
	}()
	la.abort()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("read on an aborted stream succeeded")
		}
	case <-time.After(late):
		t.Fatal("a blocked read outlived abort")
	}
	if _, err := la.Dial(raft.ServerAddress(b.ID().String()), time.Second); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("dial after abort: got %v, want net.ErrClosed", err)
	}
}
