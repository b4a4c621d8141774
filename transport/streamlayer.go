package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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
// Closing the returned transport (raft.Shutdown does it) removes the stream handler,
// unblocks Accept and resets the Raft streams still open; it does not close the Host.
// Call it once per Host.
//
// Shutdown is bounded: once a Cluster has been built on the Raft that uses this
// transport (NewCluster), raft.Shutdown ends every Raft stream the moment it starts,
// so it never waits for a peer that stopped answering (a frozen follower used to hold
// it for about two raft Timeouts). Without a Cluster, Shutdown may wait up to Timeout
// for each RPC in flight to such a peer. A stream whose graceful close takes longer
// than a second is reset.
func (h *Host) RaftTransport(cfg RaftTransportConfig) (*RaftTransport, error) {
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
	h.raftLayer.Store(sl)
	return &RaftTransport{raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          sl,
		MaxPool:         cfg.MaxPool,
		Timeout:         cfg.Timeout,
		MaxRPCsInFlight: cfg.MaxRPCsInFlight,
		Logger:          cfg.Logger,
	})}, nil
}

// streamLayer implements raft.StreamLayer over one libp2p protocol. It keeps every
// stream it hands to raft, so that it can end them all at once (abort).
type streamLayer struct {
	h     *Host
	proto protocol.ID

	incoming chan network.Stream
	done     chan struct{}
	once     sync.Once

	mu      sync.Mutex
	conns   map[*streamConn]struct{} // open streams, both directions
	aborted bool                     // abort ran: no new streams
	// aborting is closed by abort: a dial that waits for its peer ends (Dial).
	aborting chan struct{}
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// streamCloseTimeout bounds a graceful close of one stream. libp2p's Close waits up
// to 10 s for the protocol handshake's answer on a stream that never got one, and
// yamux's FIN waits behind a connection whose send queue is stuck: against a frozen
// peer that held raft's replication goroutine (and so raft.Shutdown) for 10 s per
// close. Past it the stream is reset instead.
const streamCloseTimeout = time.Second

func newStreamLayer(h *Host, proto protocol.ID) *streamLayer {
	l := &streamLayer{h: h, proto: proto, incoming: make(chan network.Stream), done: make(chan struct{}), aborting: make(chan struct{}),
		conns: map[*streamConn]struct{}{}}
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
	for {
		select {
		case s := <-l.incoming:
			if c := l.track(s); c != nil {
				return c, nil
			}
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
}

// track wraps s for raft and records it; after abort it resets s and returns nil.
func (l *streamLayer) track(s network.Stream) *streamConn {
	c := &streamConn{Stream: s, layer: l, seen: l.h.peerSeen(s.Conn().RemotePeer())}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.aborted {
		go func() { _ = s.Reset() }()
		return nil
	}
	l.conns[c] = struct{}{}
	return c
}

func (l *streamLayer) untrack(c *streamConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// abort ends every stream at once and refuses new ones (Dial fails, inbound streams
// are reset): the local Raft is shutting down. Raft closes its transport only after
// all its goroutines have returned, and a replication goroutine blocked on a write to
// a frozen peer (a full yamux window: the write deadline is raft's timeout, 10 s by
// default, and several such waits follow each other) held raft.Shutdown for tens of
// seconds. Deadlines in the past wake every blocked read and write, including one
// queued behind a stuck connection, which a reset alone does not; the resets (which
// may themselves wait for that connection) run in the background. Idempotent; does
// not block.
func (l *streamLayer) abort() {
	l.mu.Lock()
	if !l.aborted {
		close(l.aborting)
	}
	l.aborted = true
	conns := make([]*streamConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	clear(l.conns)
	l.mu.Unlock()
	now := time.Now()
	for _, c := range conns {
		_ = c.Stream.SetDeadline(now)
		go func() { _ = c.Stream.Reset() }()
	}
}

// blockedWrite returns how long the oldest Raft write to p in progress has been
// waiting (0 when none).
func (l *streamLayer) blockedWrite(p peer.ID) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest int64
	for c := range l.conns {
		if w := c.writing.Load(); w != 0 && (oldest == 0 || w < oldest) && c.Stream.Conn().RemotePeer() == p {
			oldest = w
		}
	}
	if oldest == 0 {
		return 0
	}
	return time.Since(time.Unix(0, oldest))
}

// Close removes the stream handler, unblocks Accept and ends the streams still open
// (inbound ones whose raft handler waits for the next request). Idempotent.
func (l *streamLayer) Close() error {
	l.once.Do(func() {
		l.h.h.RemoveStreamHandler(l.proto)
		close(l.done)
		l.abort()
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
	l.mu.Lock()
	aborted := l.aborted
	l.mu.Unlock()
	if aborted {
		return nil, net.ErrClosed
	}
	p, err := peer.Decode(string(address))
	if err != nil {
		return nil, fmt.Errorf("raft dial: address %q is not a peer ID: %w", address, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stop := context.AfterFunc(l.h.ctx, cancel)
	defer stop()
	go func() { // Raft shutting down (abort) or the layer closing ends a dial that waits
		select {
		case <-l.aborting:
			cancel()
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := l.dialPatiently(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("raft dial %s: %w", p, err)
	}
	c := l.track(s)
	if c == nil {
		return nil, net.ErrClosed
	}
	return c, nil
}

// dialPatiently opens a Raft stream to p, trying again until ctx ends (Raft's RPC
// timeout) rather than failing at the first refused or dead dial. hashicorp/raft
// sleeps before every retry after a failed AppendEntries, doubling up to 10.24 s, and
// only a success resets that: a peer away for a while (a laptop between networks,
// a partition) came back to a leader that waited up to the cap, plus a dial, before it
// tried again (TestFollowerBackFollowsAtOnce: 8.5 s; 28-34 s behind NATs). Waiting
// here instead, an attempt fails at most once per RPC timeout, and one made while the
// peer comes back gets it within a short attempt. Each attempt's own bound starts at
// one second and doubles (a relayed or hole-punched dial may take longer); an attempt
// sees a connection the peer opened meanwhile (Connectedness, in newStream).
func (l *streamLayer) dialPatiently(ctx context.Context, p peer.ID) (network.Stream, error) {
	bound := time.Second
	for {
		actx, cancel := context.WithTimeout(ctx, bound)
		s, err := l.h.newStream(actx, p, l.proto)
		cancel()
		if err == nil || ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(dialRetryPause):
		}
		bound *= 2
	}
}

// dialRetryPause is the pause between a Raft dial's attempts (dialPatiently).
const dialRetryPause = 100 * time.Millisecond

// newStream opens a stream to p, bypassing libp2p's dial backoff (callers have their
// own retry policy) and mapping dial failures to ErrHandshake/ErrUnreachable.
func (h *Host) newStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error) {
	if h.ctx.Err() != nil {
		return nil, ErrClosed
	}
	// Connect clears the backoff; a relayed connection is as good as a direct one
	// (WithForceDirectDial would skip relay addresses and relayed connections).
	if h.h.Network().Connectedness(p) != network.Connected {
		if err := h.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
			return nil, err
		}
	}
	// A relayed connection may be limited (member relays set no limit, but another
	// relay's could): streams on it are allowed rather than waiting for a direct one.
	return h.h.NewStream(network.WithAllowLimitedConn(ctx, "baton"), p, proto)
}

// streamConn adapts a libp2p stream to net.Conn.
type streamConn struct {
	network.Stream
	layer *streamLayer
	seen  *atomic.Int64 // the peer's last-seen time (unix ns), see Host.peerSeen
	// writing is when the Write in progress started (unix ns; 0: none). A write
	// that waits long means the peer stopped reading (a full yamux window).
	writing atomic.Int64
	once    sync.Once
	err     error
}

// Write records its start while it runs (see writing).
func (c *streamConn) Write(b []byte) (int, error) {
	c.writing.Store(time.Now().UnixNano())
	n, err := c.Stream.Write(b)
	c.writing.Store(0)
	return n, err
}

// Read notes that the peer was heard from (one atomic store per read that returned
// data: raft reads through a buffer).
func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.Stream.Read(b)
	if n > 0 && c.seen != nil {
		c.seen.Store(time.Now().UnixNano())
	}
	return n, err
}

// Close closes the stream gracefully, or resets it when that takes longer than
// streamCloseTimeout (a peer that never answers). Idempotent.
func (c *streamConn) Close() error {
	c.once.Do(func() {
		if c.layer != nil {
			c.layer.untrack(c)
		}
		done := make(chan error, 1)
		go func() { done <- c.Stream.Close() }()
		t := time.NewTimer(streamCloseTimeout)
		defer t.Stop()
		select {
		case c.err = <-done:
		case <-t.C:
			// Reset wakes the Close above (it waits for a read or for the send
			// queue); Reset itself may wait for a stuck connection: not here.
			_ = c.Stream.SetDeadline(time.Now())
			go func() { _ = c.Stream.Reset() }()
			c.err = fmt.Errorf("close raft stream to %s: reset after %v", c.Stream.Conn().RemotePeer(), streamCloseTimeout)
		}
	})
	return c.err
}

func (c *streamConn) LocalAddr() net.Addr  { return peerAddr(c.Stream.Conn().LocalPeer()) }
func (c *streamConn) RemoteAddr() net.Addr { return peerAddr(c.Stream.Conn().RemotePeer()) }

// peerAddr is a peer ID as a net.Addr.
type peerAddr peer.ID

func (a peerAddr) Network() string { return "libp2p" }
func (a peerAddr) String() string  { return peer.ID(a).String() }
