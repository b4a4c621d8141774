package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manetpkg "github.com/multiformats/go-multiaddr/net"
)

// Defaults for HostConfig.
const (
	DefaultDialTimeout = 5 * time.Second
	// DefaultPort is the TCP port of DefaultListenAddrs. A fixed port keeps a
	// device's addresses stable across restarts (members store them).
	DefaultPort = 7420
)

// DefaultListenAddrs listen on every IPv4 and IPv6 interface on DefaultPort.
var DefaultListenAddrs = []string{"/ip4/0.0.0.0/tcp/7420", "/ip6/::/tcp/7420"}

// HostConfig configures NewHost. DataDir and PSK are required.
type HostConfig struct {
	// DataDir holds identity.key and members.json. Created if missing.
	DataDir string
	// PSK is the 32-byte private network key shared by all devices. Required.
	PSK pnet.PSK
	// ListenAddrs are TCP multiaddrs (IPv4 or IPv6). Optional, defaults to
	// DefaultListenAddrs. QUIC, WebTransport and WebRTC addresses are refused
	// (ErrUnsupportedAddr): libp2p cannot run them under a private network.
	ListenAddrs []string
	// AdvertiseAddrs, when set, are the only direct addresses this device publishes
	// (invites, identify, member lists) instead of its listen addresses: TCP
	// multiaddrs with a host (ip4, ip6 or dns) and a port, without /p2p, e.g. a
	// router's forwarded port. Relay addresses are added to them. Without them the
	// listen addresses are published minus loopback (unless listening on loopback
	// only) and link-local ones. Optional.
	AdvertiseAddrs []string
	// DialTimeout bounds every outgoing dial including the handshake. Optional,
	// defaults to DefaultDialTimeout. A peer with another PSK fails within it.
	DialTimeout time.Duration
	// Logger receives gater refusals and membership events. Optional, defaults to
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock used for join windows. Optional, defaults to time.Now.
	Now func() time.Time
	// ProbeInterval is how often every member is probed (redialled when not
	// connected, then one ping): each device measures reachability itself.
	// Optional, defaults to DefaultProbeInterval.
	ProbeInterval time.Duration
}

// Host is a device's libp2p host: persistent identity, TCP + Noise + yamux under a
// private network key, a connection gater admitting members, and the persistent
// member address book. All methods are safe for concurrent use.
type Host struct {
	h     host.Host
	cfg   HostConfig
	log   *slog.Logger
	gater *gater
	book  *addrBook

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	raftLayer atomic.Pointer[streamLayer] // set by RaftTransport

	seenMu sync.Mutex
	seen   map[peer.ID]*atomic.Int64 // last message received from a peer, unix ns

	reach reach // per-member probes (reach.go)

	relaySvc *relay.Relay                    // the member relay service (relay.go)
	resv     reservations                    // this device's reservations on relay members
	circuits *atomic.Pointer[[]ma.Multiaddr] // published addresses through those relays
}

// NewHost validates cfg, loads or creates the identity and the address book, starts
// listening, and starts connecting to the known members in the background.
func NewHost(cfg HostConfig) (*Host, error) {
	if len(cfg.PSK) != PSKSize {
		return nil, ErrNoPSK
	}
	if cfg.DataDir == "" {
		return nil, errors.New("transport: HostConfig.DataDir is required")
	}
	if len(cfg.ListenAddrs) == 0 {
		cfg.ListenAddrs = DefaultListenAddrs
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	listen := make([]ma.Multiaddr, 0, len(cfg.ListenAddrs))
	for _, s := range cfg.ListenAddrs {
		a, err := parseListenAddr(s)
		if err != nil {
			return nil, err
		}
		listen = append(listen, a)
	}
	var adv []ma.Multiaddr
	for _, s := range cfg.AdvertiseAddrs {
		a, err := parseAdvertise(s)
		if err != nil {
			return nil, err
		}
		adv = append(adv, a)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	key, err := LoadOrCreateIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	book, err := loadAddrBook(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "transport")
	if loose := LooseModes(cfg.DataDir); len(loose) > 0 {
		log.Warn("others can read this device's data dir or keys: chmod 700 the dir and 600 the keys", "paths", loose)
	}
	circuits := new(atomic.Pointer[[]ma.Multiaddr])
	g := newGater(log, cfg.Now)
	for p := range book.all() {
		g.setMember(p, true)
	}
	h, err := libp2p.New(
		libp2p.Identity(key),
		libp2p.PrivateNetwork(cfg.PSK),
		libp2p.NoListenAddrs, // listenEach below, one address at a time
		// Reuseport on: outgoing connections leave from the listen port, so a NAT
		// that preserves ports maps them to the address members observe (identify)
		// and a hole punch (DCUtR, a simultaneous TCP open) can meet there. A second
		// host on a port in use would bind it too (the kernel splitting inbound
		// connections between the two): listenEach refuses that first.
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ConnectionGater(g),
		// Dial and accept relayed connections (circuit v2) and upgrade them by hole
		// punching (DCUtR); the relay service itself is started below (libp2p's
		// starts only once AutoNAT says public, which the member gater prevents).
		libp2p.EnableRelay(),
		libp2p.EnableHolePunching(),
		libp2p.DialRanker(dialRanker),
		libp2p.AddrsFactory(publishAddrs(adv, func() []ma.Multiaddr {
			if c := circuits.Load(); c != nil {
				return *c
			}
			return nil
		})),
		libp2p.WithDialTimeout(cfg.DialTimeout),
		libp2p.DisableMetrics(),
		libp2p.Ping(false),
	)
	if err != nil {
		return nil, fmt.Errorf("start libp2p host: %w", err)
	}
	if err := listenEach(h, listen); err != nil {
		_ = h.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	hst := &Host{h: h, cfg: cfg, log: log.With("node", shortPeer(h.ID().String())), gater: g, book: book, ctx: ctx, cancel: cancel,
		circuits: circuits}
	if err := hst.startRelay(); err != nil {
		_ = h.Close()
		cancel()
		return nil, fmt.Errorf("start relay service: %w", err)
	}
	for p, addrs := range book.all() {
		h.Peerstore().AddAddrs(p, addrs, peerstore.PermanentAddrTTL)
	}
	sub, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		_ = h.Close()
		cancel()
		return nil, fmt.Errorf("subscribe to identify events: %w", err)
	}
	h.Network().Notify(&network.NotifyBundle{DisconnectedF: func(_ network.Network, c network.Conn) {
		hst.forgetReservation(c.RemotePeer(), c)
	}, ConnectedF: func(_ network.Network, c network.Conn) {
		hst.closeMovedConns(c) // moved.go
	}})
	h.SetStreamHandler(RelayWindowProtocol, hst.handleRelayWindow)
	// The ping protocol answers reach.go's probes (to peers the gater admits).
	ping.NewPingService(h)
	hst.wg.Add(4)
	go func() {
		defer hst.wg.Done()
		hst.ConnectMembers(ctx)
	}()
	go hst.refreshAddrs(sub)
	go hst.probeLoop()
	go hst.reserveLoop()
	return hst, nil
}

// refreshAddrs keeps members' addresses current: when a member identifies itself
// (on every new connection) with other listen addresses than the book holds, for
// instance after it restarted on another port, the book is updated.
func (h *Host) refreshAddrs(sub event.Subscription) {
	defer h.wg.Done()
	defer sub.Close()
	for {
		select {
		case <-h.ctx.Done():
			return
		case ev, ok := <-sub.Out():
			if !ok {
				return
			}
			e := ev.(event.EvtPeerIdentificationCompleted)
			if !h.book.has(e.Peer) || len(e.ListenAddrs) == 0 {
				continue
			}
			var tcpAddrs []ma.Multiaddr
			for _, a := range e.ListenAddrs {
				if _, err := parseListenAddr(a.String()); err == nil {
					tcpAddrs = append(tcpAddrs, a)
				}
			}
			if len(tcpAddrs) == 0 {
				continue
			}
			h.h.Peerstore().AddAddrs(e.Peer, tcpAddrs, peerstore.PermanentAddrTTL)
			if err := h.book.set(e.Peer, tcpAddrs); err != nil {
				h.log.Error("update member addresses", "peer", e.Peer, "err", err)
			}
		}
	}
}

// relayDialDelay is how long a dial waits for a peer's direct addresses before it
// also tries its relay addresses (libp2p waits up to a second).
const relayDialDelay = 300 * time.Millisecond

// dialRanker is libp2p's default order (private, then public direct addresses)
// with relay addresses tried relayDialDelay after the start at the latest. Behind
// a NAT, another member's direct addresses often hang rather than fail (a SYN to a
// private address of another network, or to a NAT that drops it, with no ICMP
// answer: routers rate-limit them): with libp2p's delay of a second, a probe (one
// second) or a Raft dial ended before its relay address was tried, and two devices
// behind NATs never reached each other through a relay once a router's ICMP budget
// was spent (four devices, three NATs).
func dialRanker(addrs []ma.Multiaddr) []network.AddrDelay {
	out := swarm.DefaultDialRanker(addrs)
	for i := range out {
		if _, ok := relayOf(out[i].Addr); ok && out[i].Delay > relayDialDelay {
			out[i].Delay = relayDialDelay
		}
	}
	slices.SortStableFunc(out, func(a, b network.AddrDelay) int { return cmp.Compare(a.Delay, b.Delay) })
	return out
}

// listenEach opens every listen address on its own. libp2p's Listen succeeds as soon
// as one address works and reduces the others' errors to text, so a port in use on
// one of them (the IPv6 one, say) would go unnoticed.
func listenEach(h host.Host, addrs []ma.Multiaddr) error {
	sw, ok := h.Network().(*swarm.Swarm)
	if !ok {
		return h.Network().Listen(addrs...)
	}
	for _, a := range addrs {
		if err := portFree(a); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: %s (%v)", ErrAddrInUse, a, err)
			}
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		if err := sw.AddListenAddr(a); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: %s (%v)", ErrAddrInUse, a, err)
			}
			return fmt.Errorf("listen on %s: %w", a, err)
		}
	}
	return nil
}

// portFree binds a (a TCP address) without SO_REUSEPORT and lets it go: with
// reuseport on, libp2p's own listen would share a port another device (or program
// that set SO_REUSEPORT) holds instead of failing. Port 0 is always free.
func portFree(a ma.Multiaddr) error {
	if p, err := a.ValueForProtocol(ma.P_TCP); err != nil || p == "0" {
		return nil
	}
	l, err := manetpkg.Listen(a)
	if err != nil {
		return err
	}
	return l.Close()
}

// parseListenAddr accepts only TCP multiaddrs over ip4, ip6 or dns.
func parseListenAddr(s string) (ma.Multiaddr, error) {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", s, err)
	}
	hasTCP := false
	for _, c := range a {
		switch c.Protocol().Code {
		case ma.P_TCP:
			hasTCP = true
		case ma.P_UDP, ma.P_QUIC, ma.P_QUIC_V1, ma.P_WEBTRANSPORT, ma.P_WEBRTC, ma.P_WEBRTC_DIRECT:
			return nil, fmt.Errorf("%w: %q", ErrUnsupportedAddr, s)
		}
	}
	if !hasTCP {
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedAddr, s)
	}
	return a, nil
}

// ID returns this device's peer ID (also its Raft server ID and address).
func (h *Host) ID() peer.ID { return h.h.ID() }

// LibP2P returns the underlying libp2p host (for diagnostics; do not close it).
func (h *Host) LibP2P() host.Host { return h.h }

// Addrs returns the addresses this host publishes (HostConfig.AdvertiseAddrs, or the
// listen addresses others can dial), without the /p2p component.
func (h *Host) Addrs() []ma.Multiaddr { return h.h.Addrs() }

// AddrInfo returns this host's peer ID and published addresses.
func (h *Host) AddrInfo() peer.AddrInfo { return peer.AddrInfo{ID: h.h.ID(), Addrs: h.h.Addrs()} }

// P2PAddrs returns the published addresses with the /p2p/<id> component, the form a
// joining device is given.
func (h *Host) P2PAddrs() []ma.Multiaddr {
	as, _ := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: h.h.ID(), Addrs: h.h.Addrs()})
	return as
}

// dialAddrTTL is how long addresses given for a dial stay in the peerstore. It must
// not be peerstore.TempAddrTTL: libp2p's identify expires every address with exactly
// that TTL whenever it hears from (or loses) the peer (identify/id.go, "expire all
// temporary addrs"), so an identify message from a peer reached through a relay,
// arriving between the AddAddrs and the dial, left the dial only the peer's published
// addresses (TestDialAddrsOutliveIdentify; TestDeadDirectBesideRelayClosed failed so
// in CI).
var dialAddrTTL = peerstore.TempAddrTTL + time.Second

// addDialAddrs adds addrs to the peerstore for the dials of the next dialAddrTTL.
// Every address a dial is given goes in through here.
func (h *Host) addDialAddrs(p peer.ID, addrs []ma.Multiaddr) {
	if len(addrs) > 0 {
		h.h.Peerstore().AddAddrs(p, addrs, dialAddrTTL)
	}
}

// Connect dials p with the configured dial timeout (or ctx's deadline if earlier).
// Its addresses are added to the peerstore for the dial only (members keep theirs
// permanently through AddMember). Errors: ErrHandshake when TCP connected but the
// secure handshake failed or stalled (wrong or missing network key), ErrRefused when
// the peer's gater closed the connection (not a member, no join window open),
// ErrUnreachable when no address accepted a TCP connection; the first and last wrap
// libp2p's error.
func (h *Host) Connect(ctx context.Context, p peer.AddrInfo) error {
	if h.ctx.Err() != nil {
		return ErrClosed
	}
	if p.ID == h.h.ID() {
		return nil
	}
	if h.h.Network().Connectedness(p.ID) == network.Connected {
		return nil
	}
	h.addDialAddrs(p.ID, p.Addrs)
	if h.gater.isMember(p.ID) {
		// A member behind a NAT may be reachable only through a relay member, and
		// its published circuit addresses may not have reached this device yet.
		h.addDialAddrs(p.ID, h.viaRelays(p.ID))
	}
	dctx, cancel := context.WithTimeout(ctx, h.cfg.DialTimeout)
	defer cancel()
	// Skip libp2p's dial backoff (up to minutes after a failure), which would otherwise
	// outlast a peer's restart or a healed partition. (WithForceDirectDial would skip
	// it too, but also the peer's relay addresses.)
	if sw, ok := h.h.Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(p.ID)
	}
	err := h.h.Connect(network.WithAllowLimitedConn(dctx, "baton connect"), peer.AddrInfo{ID: p.ID})
	if err == nil {
		// The dialer finishes its handshake before the listener's gater decides, so a
		// refusal shows up as a connection closed during identify.
		protos, _ := h.h.Peerstore().GetProtocols(p.ID)
		if h.h.Network().Connectedness(p.ID) != network.Connected || len(protos) == 0 {
			return fmt.Errorf("connect %s: %w", p.ID, ErrRefused)
		}
		return nil
	}
	err = classifyDialError(p.ID, err)
	if ctx.Err() != nil {
		// The caller's deadline ended the dial: say so, keeping the classification
		// (a handshake that hangs is one symptom of a wrong key).
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// classifyDialError turns libp2p's dial error into ErrUnreachable (every address
// refused at the TCP level) or ErrHandshake (TCP connected, the upgrade failed or hung,
// which under pnet nearly always means a different network key).
func classifyDialError(p peer.ID, err error) error {
	if errors.Is(err, swarm.ErrNoAddresses) {
		return fmt.Errorf("connect %s: %w: no known addresses", p, ErrUnreachable)
	}
	if errors.Is(err, swarm.ErrGaterDisallowedConnection) {
		return fmt.Errorf("connect %s: %w", p, err)
	}
	var de *swarm.DialError
	if errors.As(err, &de) && len(de.DialErrors) > 0 {
		unreachable := 0
		for _, te := range de.DialErrors {
			var oe *net.OpError
			_, relayed := relayOf(te.Address)
			if (errors.As(te.Cause, &oe) && oe.Op == "dial") || relayed {
				// A relay that holds no reservation for the peer (or is this device)
				// says nothing about network keys either.
				unreachable++
			}
		}
		if unreachable == len(de.DialErrors) {
			return fmt.Errorf("connect %s: %w: %w", p, ErrUnreachable, err)
		}
	}
	return fmt.Errorf("connect %s: %w (%w)", p, ErrHandshake, err)
}

// ConnectMembers dials every member in the address book that is not connected yet,
// concurrently, and waits for the attempts. Failures are logged, not returned: an
// unreachable member is normal (it may be down) and Raft retries on its own.
func (h *Host) ConnectMembers(ctx context.Context) {
	var wg sync.WaitGroup
	for p, addrs := range h.book.all() {
		if p == h.h.ID() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Connect(ctx, peer.AddrInfo{ID: p, Addrs: addrs}); err != nil && ctx.Err() == nil {
				h.log.Debug("pre-connect member failed", "peer", p, "err", err)
			}
		}()
	}
	wg.Wait()
}

// AllowJoin opens a join window until `until` for one device: the gater admits peers
// that are not members (they proved the network key) but serves them only the join
// protocol, and a join request must carry token. The first successful join through
// the window spends it: the invite cannot be replayed to add a second device (that
// one gets ErrBadToken), while the device that joined may repeat its own join until
// `until` (a retry after a lost answer). While a join is in progress other devices
// are refused too. Each invite has its own window: a later AllowJoin leaves the
// earlier windows open (one with the same token replaces it); CloseJoin closes all.
func (h *Host) AllowJoin(token []byte, until time.Time) { h.AllowJoins(token, until, 1) }

// AllowJoins is AllowJoin for up to n devices (n < 1 counts as 1): each successful
// join spends one use. For provisioning several devices at once; prefer one window
// per device.
//
// The members this device reaches directly are told (within the dial timeout) to
// relay devices that are not members to it until `until`, so that a device invited
// by a member behind a NAT joins through them (relaywindow.go).
func (h *Host) AllowJoins(token []byte, until time.Time, n int) {
	h.gater.openJoin(token, until, n)
	h.announceJoinWindow(h.gater.joinUntil())
}

// CloseJoin closes every join window at once.
func (h *Host) CloseJoin() {
	h.gater.closeJoin()
	h.announceJoinWindow(time.Time{})
}

// AllowPeer admits p (and remembers its addresses for the session) without making it
// a member: a joining device allows the members it was given so they can reach it.
func (h *Host) AllowPeer(p peer.AddrInfo) {
	h.gater.allow(p.ID)
	if len(p.Addrs) > 0 {
		h.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.PermanentAddrTTL)
	}
}

// AddMember records p in the address book (persisted; addresses with a permanent
// TTL; empty Addrs keeps earlier ones) and admits it through the gater.
func (h *Host) AddMember(p peer.AddrInfo) error {
	if p.ID == h.h.ID() {
		return nil
	}
	h.gater.setMember(p.ID, true)
	if len(p.Addrs) > 0 {
		h.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.PermanentAddrTTL)
	}
	return h.book.set(p.ID, p.Addrs)
}

// RemoveMember forgets p: the gater refuses it from now on, its connections are
// closed and it leaves the address book.
func (h *Host) RemoveMember(p peer.ID) error {
	err := h.forgetMember(p)
	h.dropPeer(p)
	return err
}

// forgetMember removes p from the gater and the address book but leaves its open
// connections alone (so a reply in flight to it is still delivered).
func (h *Host) forgetMember(p peer.ID) error {
	h.gater.setMember(p, false)
	return h.book.remove(p)
}

// dropPeer closes p's connections and forgets its addresses, unless it is a member
// (again).
func (h *Host) dropPeer(p peer.ID) {
	if h.gater.isMember(p) {
		return
	}
	_ = h.h.Network().ClosePeer(p)
	h.h.Peerstore().ClearAddrs(p)
	_ = h.h.Peerstore().SetProtocols(p)
	h.seenMu.Lock()
	delete(h.seen, p)
	h.seenMu.Unlock()
	h.forgetProbe(p)
}

// Members returns the address book: every known member except this device.
func (h *Host) Members() []peer.AddrInfo {
	var out []peer.AddrInfo
	for p, as := range h.book.all() {
		out = append(out, peer.AddrInfo{ID: p, Addrs: as})
	}
	return out
}

// IsMember reports whether p is admitted to the member protocols (Raft, forwarding):
// a member in the address book or a peer allowed with AllowPeer, and not blocked.
func (h *Host) IsMember(p peer.ID) bool { return p == h.h.ID() || h.gater.isMember(p) }

// Block is fault injection (partitions in tests and drills): connections to and from
// the peers are closed and refused until Unblock or UnblockAll.
func (h *Host) Block(ps ...peer.ID) {
	h.gater.setBlocked(ps, true)
	for _, p := range ps {
		_ = h.h.Network().ClosePeer(p)
	}
}

// Unblock undoes Block for ps. It does not reconnect; Raft and forwarding redial.
func (h *Host) Unblock(ps ...peer.ID) {
	h.gater.setBlocked(ps, false)
	if sw, ok := h.h.Network().(*swarm.Swarm); ok {
		for _, p := range ps {
			sw.Backoff().Clear(p)
		}
	}
}

// UnblockAll undoes every Block.
func (h *Host) UnblockAll() {
	h.gater.unblockAll()
	if sw, ok := h.h.Network().(*swarm.Swarm); ok {
		for p := range h.book.all() {
			sw.Backoff().Clear(p)
		}
	}
}

// abortRaft ends every Raft stream at once and refuses new ones: the local Raft is
// shutting down (see streamLayer.abort). No-op before RaftTransport.
func (h *Host) abortRaft() {
	if l := h.raftLayer.Load(); l != nil {
		l.abort()
	}
}

// peerSeen returns the cell holding the last time a message was received from p
// (unix ns, 0 for never), created on first use. Streams keep the pointer, so that a
// read costs one atomic store and no lookup.
func (h *Host) peerSeen(p peer.ID) *atomic.Int64 {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	if h.seen == nil {
		h.seen = map[peer.ID]*atomic.Int64{}
	}
	c, ok := h.seen[p]
	if !ok {
		c = new(atomic.Int64)
		h.seen[p] = c
	}
	return c
}

// touch records that a message from p was received now.
func (h *Host) touch(p peer.ID) { h.peerSeen(p).Store(time.Now().UnixNano()) }

// lastSeen returns the last time a message was received from p (zero for never
// since this host started).
func (h *Host) lastSeen(p peer.ID) time.Time {
	h.seenMu.Lock()
	c := h.seen[p]
	h.seenMu.Unlock()
	if c == nil || c.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, c.Load())
}

// Close stops background dials and closes the libp2p host (all streams, listeners
// and stream handlers). Close the Raft node and Cluster first. Idempotent.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.cancel()
		if h.relaySvc != nil {
			_ = h.relaySvc.Close()
		}
		h.closeErr = h.h.Close()
		h.wg.Wait()
	})
	return h.closeErr
}

// shortPeer is the short form of a peer ID in logs (its last 8 characters), as the
// node logs it.
func shortPeer(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}
