package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// RaftProtocol is the libp2p protocol carrying Raft RPCs.
const RaftProtocol protocol.ID = "/baton/raft/1.0.0"

// Defaults for RaftTransportConfig.
const (
	DefaultRaftMaxPool = 3
	DefaultRaftTimeout = 10 * time.Second
)

// RaftTransportConfig configures Host.RaftTransport. Every field is optional.
type RaftTransportConfig struct {
	// MaxPool is the number of idle streams kept per peer. Defaults to
	// DefaultRaftMaxPool; values below 3 are raised to 3 (a pool of 0 opens a stream
	// per heartbeat and gains nothing over libp2p's own multiplexing).
	MaxPool int
	// Timeout is raft's I/O deadline per RPC (scaled up for snapshots). Defaults to
	// DefaultRaftTimeout.
	Timeout time.Duration
	// MaxRPCsInFlight is passed to raft (pipelining depth); 0 is raft's default.
	MaxRPCsInFlight int
	// Logger is raft's network transport logger. Defaults to an hclog logger at Warn.
	Logger hclog.Logger
}

// RaftTransport returns a raft.NetworkTransport over the RaftProtocol libp2p protocol.
// The peer ID string is both raft.ServerID and raft.ServerAddress. Only members (and
// peers admitted with AllowPeer) may open Raft streams to this host; others are reset.
// Closing the returned transport (raft.Shutdown does it) removes the stream handler and
// unblocks Accept; it does not close the Host. Call it once per Host.
func (h *Host) RaftTransport(cfg RaftTransportConfig) (*raft.NetworkTransport, error) {
	if h.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if cfg.MaxPool < DefaultRaftMaxPool {
		cfg.MaxPool = DefaultRaftMaxPool
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRaftTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft-net", Level: hclog.Warn})
	}
	sl := newStreamLayer(h, RaftProtocol)
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          sl,
		MaxPool:         cfg.MaxPool,
		Timeout:         cfg.Timeout,
		MaxRPCsInFlight: cfg.MaxRPCsInFlight,
		Logger:          cfg.Logger,
	}), nil
}

// streamLayer implements raft.StreamLayer over one libp2p protocol.
type streamLayer struct {
	h     *Host
	proto protocol.ID

	incoming chan network.Stream
	done     chan struct{}
	once     sync.Once
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func newStreamLayer(h *Host, proto protocol.ID) *streamLayer {
	l := &streamLayer{h: h, proto: proto, incoming: make(chan network.Stream), done: make(chan struct{})}
	h.h.SetStreamHandler(proto, l.handle)
	return l
}

func (l *streamLayer) handle(s network.Stream) {
	remote := s.Conn().RemotePeer()
	if !l.h.IsMember(remote) {
		l.h.log.Warn("refused raft stream from non-member", "peer", remote)
		_ = s.Reset()
		return
	}
	select {
	case l.incoming <- s:
	case <-l.done:
		_ = s.Reset()
	}
}

// Accept waits for the next inbound Raft stream. It returns net.ErrClosed once the
// layer is closed.
func (l *streamLayer) Accept() (net.Conn, error) {
	select {
	case s := <-l.incoming:
		return &streamConn{Stream: s}, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close removes the stream handler and unblocks Accept. Idempotent.
func (l *streamLayer) Close() error {
	l.once.Do(func() {
		l.h.h.RemoveStreamHandler(l.proto)
		close(l.done)
	})
	return nil
}

// Addr returns this host's peer ID as a net.Addr.
func (l *streamLayer) Addr() net.Addr { return peerAddr(l.h.ID()) }

// Dial opens a stream to the peer whose ID is address, within timeout (dial,
// handshake and protocol selection included).
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	p, err := peer.Decode(string(address))
	if err != nil {
		return nil, fmt.Errorf("raft dial: address %q is not a peer ID: %w", address, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := l.h.newStream(ctx, p, l.proto)
	if err != nil {
		return nil, fmt.Errorf("raft dial %s: %w", p, err)
	}
	return &streamConn{Stream: s}, nil
}

// newStream opens a stream to p, bypassing libp2p's dial backoff (callers have their
// own retry policy) and mapping dial failures to ErrHandshake/ErrUnreachable.
func (h *Host) newStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error) {
	if h.ctx.Err() != nil {
		return nil, ErrClosed
	}
	ctx = network.WithForceDirectDial(ctx, "baton")
	if h.h.Network().Connectedness(p) != network.Connected {
		if err := h.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
			return nil, err
		}
	}
	return h.h.NewStream(ctx, p, proto)
}

// streamConn adapts a libp2p stream to net.Conn.
type streamConn struct {
	network.Stream
}

func (c *streamConn) LocalAddr() net.Addr  { return peerAddr(c.Stream.Conn().LocalPeer()) }
func (c *streamConn) RemoteAddr() net.Addr { return peerAddr(c.Stream.Conn().RemotePeer()) }

// peerAddr is a peer ID as a net.Addr.
type peerAddr peer.ID

func (a peerAddr) Network() string { return "libp2p" }
func (a peerAddr) String() string  { return peer.ID(a).String() }
