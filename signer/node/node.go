package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// Defaults for Config fields left zero.
const (
	DefaultNodeTTL  = election.DefaultTTL
	DefaultNodeTick = signer.DefaultTick
	// SocketFile is the API socket's name inside the data directory.
	SocketFile = "baton.sock"
	// DefaultSubmitTimeout bounds a Submit whose context has no deadline.
	DefaultSubmitTimeout = 30 * time.Second
	// DefaultStopTimeout bounds Stop's release when its context has no deadline.
	DefaultStopTimeout = 5 * time.Second
)

// Config configures Start. DataDir and PSK are required; ChainKey is required to
// sign (a node without one is a replica that never claims the lease but verifies
// and serves the chain), and then Chain is required.
type Config struct {
	// DataDir holds identity.key, members.json, raft.db, state.db, snapshots/ and
	// baton.sock. Created if missing.
	DataDir string
	// ListenAddrs are libp2p TCP multiaddrs. Optional, default transport.DefaultListenAddrs.
	ListenAddrs []string
	// AdvertiseAddrs, when set, are the only direct addresses this device publishes
	// (invites, member lists) instead of its listen addresses (transport.HostConfig).
	// Optional.
	AdvertiseAddrs []string
	// PSK is the network key. Required.
	PSK pnet.PSK
	// ChainKey is the chain key. nil: a replica that never signs (it still verifies).
	ChainKey chain.Key
	// Chain is the chain's did:key. Defaults to ChainKey.DID(); required without a
	// ChainKey; must equal ChainKey.DID() with one.
	Chain string
	// Bootstrap makes this device the first of a new cluster (a no-op when Raft
	// state exists already).
	Bootstrap bool
	// RepoDID, on an atproto chain, is the repository DID the genesis names when this
	// device writes it (a did:plc the user already has: intentlog.GenesisEntry.Repo);
	// the first commit then carries it. Optional: without it the repository's DID is
	// the chain key's did:key. Only the device that writes the genesis reads it.
	RepoDID string
	// Name is this device's human name (names.go: ValidName), shown by the members
	// beside its ID. Optional.
	Name string
	// Join joins an existing cluster on first start (ignored when Raft state exists).
	Join *JoinConfig
	// GenesisFile is where this device remembers which history its chain key belongs
	// to (the genesis hash, written once the genesis is applied). Default
	// <DataDir>/chain.genesis; "-" disables the check.
	GenesisFile string
	// NewHistory allows bootstrapping a new cluster with a chain key that already has
	// a history: it starts a second history of the same chain, which every reader of
	// the first sees as a fork. Only for an operator who knows the first is gone.
	NewHistory bool
	// MarkFile keeps, outside the data dir, the highest Raft term this device reached
	// and how far it had applied, so that a data dir restored from an older copy is
	// recognised (see fence.go). Default <DataDir>.mark; "-" disables it.
	MarkFile string
	// Retention and MaxIDs go into the genesis a bootstrapping device writes: how long
	// the dedupe window remembers an intent ID at least (log time; default 24 h) and
	// an optional cap on remembered IDs (0: none). Fixed for the cluster's life. Every
	// device's TTL must be at most a sixteenth of the genesis's retention
	// (intentlog.CheckLeaseTTL): checked here when Bootstrap is set, and against the
	// genesis wherever this device finds one (at start, after a join, once applied).
	Retention time.Duration
	MaxIDs    uint64
	// TTL of this device's lease claims (default 15 s) and Tick of its signer loop
	// (default 2 s).
	TTL, Tick time.Duration
	// Clock defaults to election.SystemClock(); testnet injects skewed clocks.
	Clock election.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Raft optionally adjusts the raft.Config (tests: short election timeouts).
	// Default: RaftTimeouts(TTL).
	Raft func(*raft.Config)
	// RaftLogLevel is the least level of Raft's own messages passed to Logger (as
	// structured attributes, component=raft). Optional, default DefaultRaftLogLevel
	// (warn).
	RaftLogLevel slog.Leveler
	// Knobs are test hooks (package internal/knobs: only baton's own tests and
	// simulator can set them); nil has none.
	Knobs *knobs.Node
}

// JoinConfig says how a new device joins an existing cluster on its first start.
type JoinConfig struct {
	Seeds    []string // p2p multiaddrs (with /p2p/<peer ID>) of members
	Token    []byte   // the join window's token (from `baton invite`)
	NonVoter bool     // join as a non-voter
}

// Node is one baton device: libp2p host, Raft intent log, lease, signer loop and the
// local API, wired together. All methods are safe for concurrent use.
type Node struct {
	cfg Config
	// departed: members that said they stop gracefully, by peer ID, with when
	// (goodbye.go).
	departed sync.Map
	names    *names // the members' names (names.go); nil for a node built by New
	logger   *slog.Logger
	id       string
	host     *transport.Host    // nil when built by New
	cluster  *transport.Cluster // nil when built by New
	net      Network
	// closeNet closes the network stack first on Kill (the host: like a pulled cable).
	closeNet func() error
	log      *intentlog.Log
	prop     *proposer
	lease    *election.Lease
	loop     *signer.Loop // nil without a chain key
	batch    *batcher
	metrics  *metrics
	hashes   hashCache     // commitHash's cache
	ops      *opsState     // removal, takeover times, start time (ops.go)
	fence    *fence        // the catch-up fence and the mark (fence.go)
	memory   *peerMemory   // what this device remembers of the others (peermemory.go)
	inc      incarnation   // this process among those with its identity (clone.go)
	calls    atomic.Uint64 // memory calls made (clone.go)
	clones   *cloneTracker
	cloned   chan struct{}
	cloneErr atomic.Pointer[error]

	ctx      context.Context // cancelled by Stop/Kill
	cancel   context.CancelFunc
	loopStop context.CancelFunc
	wg       sync.WaitGroup // background goroutines (loop, follow)
	loopDone chan struct{}

	killed atomic.Bool // Kill: nothing more leaves this node
	clocks peerClocks  // the members' clocks measured (peerclock.go)
	// started is closed when run starts: the network serves from the moment it
	// exists, in assemble, but the handlers wait for it (afterStart).
	started chan struct{}
	// identityErr is set when the applied genesis disagrees with this device;
	// divergence when its state differs from the others' (see Health).
	identityErr  atomic.Pointer[error]
	divergence   atomic.Pointer[error]
	digestChecks atomic.Uint64

	stopOnce sync.Once
	stopErr  error
}

// Start opens the node in cfg.DataDir and starts it over libp2p: host, Raft, cluster
// membership (bootstrap or join on first start), lease and signer loop. ctx bounds the
// start (a join waits for the leader); it does not bound the node's life, which ends
// with Stop or Kill. The local HTTP API is package api's (api.Start over the node).
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if err := cfg.setDefaults(true); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	ns := loadNames(cfg.DataDir)
	cfg.Logger = slog.New(namedLogs{h: cfg.Logger.Handler(), ns: ns}) // lognames.go
	host, err := transport.NewHost(transport.HostConfig{DataDir: cfg.DataDir, PSK: cfg.PSK,
		ListenAddrs: cfg.ListenAddrs, AdvertiseAddrs: cfg.AdvertiseAddrs, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("start: host: %w", err)
	}
	id := host.ID().String()
	ns.setSelf(id, cfg.Name)
	trans, err := host.RaftTransport(transport.RaftTransportConfig{Logger: newRaftLogger(cfg.Logger.With("node", shortID(id)), cfg.RaftLogLevel, nil)})
	if err != nil {
		_ = host.Close()
		return nil, fmt.Errorf("start: raft transport: %w", err)
	}
	var cluster *transport.Cluster
	var known []string
	for _, m := range host.Members() {
		known = append(known, m.ID.String())
	}
	n, err := assemble(cfg, Parts{ID: id, Raft: trans, known: known, Net: func(r *raft.Raft, h Handlers) (Network, error) {
		c, err := transport.NewCluster(host, r, h.Apply, transport.ClusterConfig{Logger: cfg.Logger.With("node", shortID(id)),
			Barrier: h.Barrier, KeepMembers: h.Stale,
			OnCall: func(ctx context.Context, from peer.ID, payload []byte) ([]byte, error) {
				return h.Call(ctx, from.String(), payload)
			}})
		if err != nil {
			return nil, err
		}
		cluster = c
		return clusterNet{c}, nil
	}}, host.Close)
	if err != nil {
		_ = trans.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	n.host, n.cluster = host, cluster
	n.names = ns
	n.fence.members = func() []string { return p2pAddrs(host.Members()) }
	// Whether it starts fresh is decided on the address book it has (a data dir wiped
	// to join again knows no one and joins); the members only the mark names are
	// admitted after, for a restored copy to be reached by them.
	others := len(host.Members())
	n.admitMarkMembers()
	fresh := n.rejoinOrFresh(others)
	if err := n.checkIdentity(fresh && cfg.Bootstrap); err != nil {
		_ = n.Kill()
		return nil, fmt.Errorf("start: %w", err)
	}
	if fresh {
		switch {
		case cfg.Bootstrap:
			err = cluster.Bootstrap()
			if errors.Is(err, raft.ErrCantBootstrap) {
				err = nil
			}
		case cfg.Join != nil:
			var seeds []peer.AddrInfo
			if seeds, err = transport.ParseSeeds(cfg.Join.Seeds); err != nil {
				err = fmt.Errorf("join seeds: %w", err)
			} else if err = cluster.Join(ctx, seeds, cfg.Join.Token, cfg.Join.NonVoter); err != nil {
				err = fmt.Errorf("join: %w", err)
			}
		}
		if err != nil {
			_ = n.Kill()
			return nil, fmt.Errorf("start: %w", err)
		}
		if cfg.Join != nil {
			if err := n.checkJoined(ctx); err != nil {
				_ = cluster.Leave(context.WithoutCancel(ctx))
				_ = n.Kill()
				return nil, fmt.Errorf("start: %w", err)
			}
			n.logger.Info("joined the cluster: this device is a member from now on (leave with `baton leave`)",
				"voter", !cfg.Join.NonVoter, "members", len(n.log.Raft().GetConfiguration().Configuration().Servers))
		}
	}
	n.run(fresh && cfg.Bootstrap)
	n.logger.Info("node started", "id", id, "chain", cfg.Chain, "addrs", n.Addrs(), "signer", cfg.ChainKey != nil)
	return n, nil
}

// Network is how a device reaches the other members: proposals and read barriers go
// to the Raft leader, calls to one named member. In production it is package
// transport's Cluster over libp2p; a simulator supplies its own. Errors follow
// transport's sentinels (transport.ErrNoLeader, ErrTimeout, ErrNotMember,
// *transport.RemoteError).
type Network interface {
	// Propose runs an encoded entry through the leader's Handlers.Apply and returns
	// its answer. An error means the outcome is unknown unless it says otherwise.
	Propose(ctx context.Context, entry []byte) ([]byte, error)
	// Barrier returns the leader's applied index after a Raft barrier.
	Barrier(ctx context.Context) (uint64, error)
	// Call sends a request to one member (by ID), which answers through its
	// Handlers.Call. The caller's ctx bounds it.
	Call(ctx context.Context, to string, payload []byte) ([]byte, error)
	// Close stops serving and sending; in-flight calls fail.
	Close() error
}

// Handlers are what a Network delivers to this device.
type Handlers struct {
	// Apply runs on the leader: an encoded entry through the local log.
	Apply func(ctx context.Context, entry []byte) ([]byte, error)
	// Barrier runs on the leader: a Raft barrier, answering the applied index.
	Barrier func(ctx context.Context) (uint64, error)
	// Call answers another member's Network.Call.
	Call func(ctx context.Context, from string, payload []byte) ([]byte, error)
	// Stale reports whether this device knows its Raft configuration to be stale
	// (its fence is up or pending): the network keeps the members it knows.
	Stale func() bool
}

// Parts are what New needs besides the Config: this device's ID (its Raft server ID and
// address), a Raft transport, and the network built once Raft exists.
type Parts struct {
	ID   string
	Raft raft.Transport
	Net  func(r *raft.Raft, h Handlers) (Network, error)
	// Servers is the configuration Config.Bootstrap writes on a fresh data dir
	// (default: this device alone).
	Servers []raft.Server

	known []string // other members this device knows outside Raft (Start: its address book)
}

// New assembles a node from parts instead of libp2p (a simulator's network, for one):
// the intent log in cfg.DataDir over parts.Raft, the lease and the signer loop. With
// cfg.Bootstrap and a fresh data dir it bootstraps parts.Servers. Membership by invite
// (Join, AllowJoin, AddMember) and Host are libp2p's and unsupported here.
func New(cfg Config, parts Parts) (*Node, error) {
	if err := cfg.setDefaults(false); err != nil {
		return nil, err
	}
	if parts.ID == "" || parts.Raft == nil || parts.Net == nil {
		return nil, fmt.Errorf("%w: Parts needs an ID, a Raft transport and a network", ErrBadConfig)
	}
	n, err := assemble(cfg, parts, nil)
	if err != nil {
		return nil, err
	}
	fresh := n.rejoinOrFresh(max(len(parts.Servers)-1, 0))
	if err := n.checkIdentity(fresh && cfg.Bootstrap); err != nil {
		_ = n.Kill()
		return nil, err
	}
	if cfg.Bootstrap && fresh {
		servers := parts.Servers
		if len(servers) == 0 {
			servers = []raft.Server{{ID: raft.ServerID(parts.ID), Address: raft.ServerAddress(parts.ID)}}
		}
		if err := n.log.Bootstrap(servers); err != nil && !errors.Is(err, intentlog.ErrAlreadyBootstrapped) {
			_ = n.Kill()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	n.run(fresh && cfg.Bootstrap)
	return n, nil
}

// assemble opens the log and builds everything but starts no goroutine of its own;
// run starts them. closeFirst, if set, is closed first on failure and on Kill.
func assemble(cfg Config, parts Parts, closeFirst func() error) (_ *Node, err error) {
	n := &Node{cfg: cfg, id: parts.ID, logger: cfg.Logger.With("node", shortID(parts.ID)), loopDone: make(chan struct{}),
		closeNet: closeFirst, ops: newOpsState(), started: make(chan struct{}),
		inc: newIncarnation(time.Now()), clones: newCloneTracker(), cloned: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	// Until run starts the loop, stopping it means only marking it done.
	n.loopStop = func() { close(n.loopDone) }
	var closers []func() error
	if closeFirst != nil {
		closers = append(closers, closeFirst)
	}
	defer func() {
		if err != nil {
			n.cancel()
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	if n.fence, err = newFence(cfg, parts.ID, n.logger); err != nil {
		return nil, err
	}
	n.fence.known = parts.known
	if n.memory, err = loadPeerMemory(cfg.DataDir); err != nil {
		if n.memory == nil {
			return nil, err
		}
		n.logger.Warn("what this device remembers of the others is unreadable", "err", err)
	}
	fenced := newFencedTransport(parts.Raft, n.fence)
	go fenced.run(n.ctx)
	n.log, err = intentlog.Open(intentlog.Config{Dir: cfg.DataDir, LocalID: raft.ServerID(parts.ID),
		Verify: signer.Verifier(""), Logger: n.logger, Raft: withRaftLogger(cfg.Raft, newRaftLogger(n.logger, cfg.RaftLogLevel, n.namesDeparted)), Knobs: cfg.intentlogKnobs(),
		OnTerm: n.fence.sawTerm, Mono: cfg.Clock.Mono,
		Hold: func(st intentlog.StartState) bool { return n.fence.decide(cfg.DataDir, st) }}, fenced)
	if err != nil {
		return nil, fmt.Errorf("intent log: %w", err)
	}
	closers = append(closers, n.log.Close)
	// Raft runs (held if the fence is up: Hold), but got no message before the fence
	// was decided.
	fenced.release()
	n.net, err = parts.Net(n.log.Raft(), n.afterStart(Handlers{Apply: n.applyOnLeader, Barrier: n.barrierOnLeader, Call: n.handleCall,
		Stale: func() bool { return n.fence.armed.Load() || n.fence.pending.Load() }}))
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	closers = append(closers, n.net.Close)
	n.prop = &proposer{log: n.log, net: n.net, killed: &n.killed}
	if k := cfg.Knobs; k != nil && k.BeforePropose != nil {
		n.prop.before = func(ctx context.Context, e intentlog.Entry) context.Context { return k.BeforePropose(ctx, e) }
	}
	n.lease, err = election.New(n.prop, parts.ID, cfg.Clock, election.Options{TTL: cfg.TTL, Knobs: cfg.electionKnobs()})
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	n.clocks.kick = make(chan struct{}, 1)
	n.metrics = newMetrics(n)
	n.batch = newBatcher(n)
	if cfg.ChainKey != nil {
		n.loop, err = signer.NewLoop(signer.LoopConfig{Self: parts.ID, Key: cfg.ChainKey, Lease: n.lease,
			Log: n.prop, Clock: cfg.Clock, RevClock: n.clusterNow, Tick: cfg.Tick, Logger: n.logger,
			Healthy: n.Health, Diverged: n.diverge, Knobs: cfg.signerKnobs()})
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

// run starts the node's goroutines: the lease follower, the metrics follower, the
// genesis keeper and the signer loop. bootstrapped: this device just bootstrapped a
// new cluster (it writes the genesis).
func (n *Node) run(bootstrapped bool) {
	close(n.started) // the handlers may run: every part is built
	n.wg.Add(4)
	go func() {
		defer n.wg.Done()
		n.keepChecking(DigestCheckEvery)
	}()
	go func() {
		defer n.wg.Done()
		n.keepGenesis(bootstrapped, func(err error) {
			n.identityErr.Store(&err)
			n.logger.Error("the chain's genesis does not fit this device (another chain or history, or a TTL too long for its retention); it will not sign", "err", err)
		})
	}()
	go func() {
		defer n.wg.Done()
		_ = n.lease.Follow(n.ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.metrics.follow()
	}()
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.opsLoop()
	}()
	go func() {
		defer n.wg.Done()
		n.keepFence()
	}()
	if n.fence.pending.Load() {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.askPeersAboutMe(n.fence.start)
		}()
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.keepPeerMemory()
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.keepReplacing()
	}()
	if n.cluster != nil { // a device over libp2p (the simulator's have no names)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.keepNames()
		}()
	}
	if n.signsAtproto() {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.keepProbingClocks()
		}()
	}
	loopCtx, loopStop := context.WithCancel(context.Background())
	n.loopStop = loopStop
	go func() {
		defer close(n.loopDone)
		if n.loop == nil {
			<-loopCtx.Done()
			return
		}
		if err := n.loop.Run(loopCtx); err != nil {
			n.logger.Warn("signer loop stopped", "err", err)
		}
	}()
}

// afterStart returns h with every handler waiting until the node is started (run),
// or failing with ErrStopped if it stops first. The network serves from the moment
// assemble builds it, before the lease, the loop and the rest exist: a member's call
// that arrived then read them as they were written (the simulator's seed 215 under
// -race: a forwarded submission's Loop.Add read the lease election.New was writing,
// on a device restarting).
func (n *Node) afterStart(h Handlers) Handlers {
	wait := func(ctx context.Context) error {
		select {
		case <-n.started:
			return nil
		case <-n.ctx.Done():
			return ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return Handlers{
		Stale: h.Stale,
		Apply: func(ctx context.Context, entry []byte) ([]byte, error) {
			if err := wait(ctx); err != nil {
				return nil, err
			}
			return h.Apply(ctx, entry)
		},
		Barrier: func(ctx context.Context) (uint64, error) {
			if err := wait(ctx); err != nil {
				return 0, err
			}
			return h.Barrier(ctx)
		},
		Call: func(ctx context.Context, from string, payload []byte) ([]byte, error) {
			if err := wait(ctx); err != nil {
				return nil, err
			}
			return h.Call(ctx, from, payload)
		},
	}
}

// clusterNet is transport.Cluster as a Network.
type clusterNet struct{ c *transport.Cluster }

func (c clusterNet) Propose(ctx context.Context, entry []byte) ([]byte, error) {
	return c.c.Propose(ctx, entry)
}

func (c clusterNet) Barrier(ctx context.Context) (uint64, error) { return c.c.Barrier(ctx) }

func (c clusterNet) Call(ctx context.Context, to string, payload []byte) ([]byte, error) {
	p, err := peer.Decode(to)
	if err != nil {
		return nil, fmt.Errorf("%w: call %q: %w", ErrBadRequest, to, err)
	}
	return c.c.Call(ctx, p, payload)
}

func (c clusterNet) Close() error { return c.c.Close() }

// RaftTimeouts returns the Raft timing a node uses by default for a lease TTL: a
// heartbeat and election timeout of TTL/5 (1 s to 5 s), the leader lease half of it.
// A failover waits a whole TTL for the lease to lapse anyway, and the Raft election
// after a leader's death runs inside that wait, so longer Raft timeouts cost a
// failover nothing while they cut the heartbeats (HeartbeatTimeout/10 apart, to each
// follower) that are part of an idle leader's CPU.
//
// CommitTimeout is a quarter of that, at most TTL/10 (750 ms at a 15 s TTL), instead
// of Raft's 50 ms: an idle leader sends every follower an AppendEntries each
// CommitTimeout (up to twice it), which at 50 ms was most of its idle CPU, seven
// times its heartbeats (profile in docs/BENCHMARKS.md). It only bounds how late a
// follower learns the commit index when no entry follows: the entries other devices
// wait for (claims, releases, transfers, signed commits) are nudged at once
// (intentlog), and a renewal, proposed with half the TTL left, reaches a standby at
// most 2*CommitTimeout <= TTL/5 late, well inside that half (a claim against the
// record it replaced would be refused anyway: claims compare the whole record).
func RaftTimeouts(ttl time.Duration) func(*raft.Config) {
	t := min(max(ttl/5, time.Second), 5*time.Second)
	return func(c *raft.Config) {
		c.HeartbeatTimeout = t
		c.ElectionTimeout = t
		c.LeaderLeaseTimeout = t / 2
		c.CommitTimeout = max(min(t/4, ttl/10), time.Millisecond)
	}
}

func (c *Config) signerKnobs() *knobs.Signer {
	if c.Knobs == nil {
		return nil
	}
	return c.Knobs.Signer
}

func (c *Config) intentlogKnobs() *knobs.Intentlog {
	if c.Knobs == nil {
		return nil
	}
	return c.Knobs.Intentlog
}

// setDefaults validates c and fills in defaults; libp2p: for Start (a PSK is needed).
func (c *Config) setDefaults(libp2p bool) error {
	if c.DataDir == "" {
		return fmt.Errorf("%w: DataDir is required", ErrBadConfig)
	}
	if libp2p && len(c.PSK) != transport.PSKSize {
		return fmt.Errorf("%w: a %d-byte PSK is required", ErrBadConfig, transport.PSKSize)
	}
	switch {
	case c.ChainKey != nil && c.Chain == "":
		c.Chain = c.ChainKey.DID()
	case c.ChainKey != nil && c.Chain != c.ChainKey.DID():
		return fmt.Errorf("%w: Chain %q is not the chain key's did %q", ErrBadConfig, c.Chain, c.ChainKey.DID())
	case c.ChainKey == nil && c.Chain == "":
		return fmt.Errorf("%w: Chain is required without a ChainKey", ErrBadConfig)
	}
	if err := signer.CheckChainDID(c.Chain); err != nil {
		return fmt.Errorf("%w: chain: %w", ErrBadConfig, err)
	}
	if c.RepoDID != "" {
		if err := signer.CheckRepoDID(c.Chain, c.RepoDID); err != nil {
			return fmt.Errorf("%w: RepoDID: %w", ErrBadConfig, err)
		}
	}
	if c.Name != "" {
		if err := ValidName(c.Name); err != nil {
			return err
		}
	}
	if c.Bootstrap && c.Join != nil {
		return fmt.Errorf("%w: Bootstrap and Join are exclusive", ErrBadConfig)
	}
	if c.Join != nil && len(c.Join.Seeds) == 0 {
		return fmt.Errorf("%w: Join needs at least one seed", ErrBadConfig)
	}
	if c.TTL == 0 {
		c.TTL = DefaultNodeTTL
	}
	if c.Tick == 0 {
		c.Tick = DefaultNodeTick
	}
	if c.TTL < 0 || c.Tick < 0 {
		return fmt.Errorf("%w: negative TTL or Tick", ErrBadConfig)
	}
	// The loop's calls are bounded by 3/4 of a tick: a hold's window must fit a few.
	if err := election.CheckTiming(c.TTL, c.Tick, c.Tick*3/4); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if c.Retention < 0 {
		return fmt.Errorf("%w: negative Retention", ErrBadConfig)
	}
	// The TTL against the retention of the genesis this device writes; a device that
	// finds the genesis checks it against that one (checkGenesis).
	if c.Bootstrap {
		if err := intentlog.CheckLeaseTTL(c.TTL, c.Retention); err != nil {
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	if c.Clock == nil {
		c.Clock = election.SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Raft == nil {
		c.Raft = RaftTimeouts(c.TTL)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// ID returns this device's libp2p peer ID.
func (n *Node) ID() string { return n.id }

// Chain returns the chain's did:key.
func (n *Node) Chain() string { return n.cfg.Chain }

// Addrs returns this device's full /p2p/ multiaddrs, usable as join seeds (invites):
// transport.Host.InviteAddrs, relay addresses included.
func (n *Node) Addrs() []string {
	if n.host == nil {
		return nil
	}
	var out []string
	for _, a := range n.host.InviteAddrs() {
		out = append(out, a.String())
	}
	return out
}

// Host returns the libp2p host (testnet uses Block/Unblock for partitions); nil for a
// node built by New.
func (n *Node) Host() *transport.Host { return n.host }

// Log returns the local intent log (read-only use: views, records, commits).
func (n *Node) Log() *intentlog.Log { return n.log }

// Lease returns this device's lease handle.
func (n *Node) Lease() *election.Lease { return n.lease }

// HoldContext returns a context cancelled the moment this device's current hold of
// the lease ends (already cancelled when it does not hold). Fetch it again after a
// new claim.
func (n *Node) HoldContext() context.Context { return n.lease.HoldContext() }

// Lost returns a channel closed the moment this device's current hold ends (already
// closed when it does not hold). Fetch it again after a new claim.
func (n *Node) Lost() <-chan struct{} { return n.lease.Lost() }

// Done is closed once the node is stopping (Stop or Kill).
func (n *Node) Done() <-chan struct{} { return n.ctx.Done() }

// Holds reports whether this device holds the lease and may sign now.
// It is the signer loop's view: the lease names this device, the local replica shows
// the hold and the chain's genesis, and the epoch was not given up.
func (n *Node) Holds() bool { return n.loop != nil && n.loop.Holding() }

// Record returns the signed value at path.
func (n *Node) Record(path string) ([]byte, bool, error) {
	if !intentlog.ValidPath(path) {
		return nil, false, fmt.Errorf("%w: %q", ErrBadPath, path)
	}
	return n.log.Record(path)
}

// Records returns signed records whose path starts with prefix, in path order, at
// most limit (limit <= 0: all).
func (n *Node) Records(prefix string, limit int) ([]intentlog.Record, error) {
	return n.log.Records(prefix, limit)
}

// Commits delivers the applied commits from fromSeq (0 means 1) in order. Without
// follow the channel closes after the commit that was the head when Commits was
// called; with follow it keeps delivering until ctx is done. A last value with Err
// set reports a read failure.
func (n *Node) Commits(ctx context.Context, fromSeq uint64, follow bool) <-chan signer.AppliedCommit {
	if follow {
		return signer.Commits(ctx, n.log, fromSeq)
	}
	head := n.log.View().Head.Seq
	ch := make(chan signer.AppliedCommit)
	go func() {
		defer close(ch)
		for seq := max(fromSeq, 1); seq <= head; seq++ {
			raw, err := n.log.Commit(seq)
			var c signer.AppliedCommit
			if err == nil {
				var dc chain.Commit
				dc, err = signer.DecodeCommit(raw)
				c = signer.AppliedCommit{Seq: dc.Seq, Hash: chain.Hash(raw), Epoch: dc.Epoch, Signer: dc.Signer, Raw: raw}
			}
			if err != nil {
				c = signer.AppliedCommit{Err: fmt.Errorf("commit %d: %w", seq, err)}
			}
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// Steal takes the lease by force (operator override for a wedged holder); reason is
// required and lands in the lease history.
func (n *Node) Steal(ctx context.Context, reason string) error {
	if reason == "" {
		return fmt.Errorf("%w: a steal needs a reason", ErrBadRequest)
	}
	if len(reason) > intentlog.MaxReasonLen {
		return fmt.Errorf("%w: reason longer than %d bytes", ErrTooLarge, intentlog.MaxReasonLen)
	}
	if n.cfg.ChainKey == nil {
		return fmt.Errorf("%w: this device has no chain key and cannot sign", ErrConflict)
	}
	// The signer loop asks the same before each of its lease writes: a device that
	// may not sign (catching up, diverged, a storage fault) takes no lease either.
	if err := n.Health(); err != nil {
		return fmt.Errorf("steal: this device may not sign: %w", err)
	}
	before := n.log.View()
	d := n.lease.Decide()
	// The evidence an auditor wants next to the history's reason: what this device
	// saw of the lease it took (holder, epoch, record age by both clocks) and the head.
	evidence := []any{"reason", reason, "prior_holder", before.Lease.Holder, "prior_epoch", before.Lease.Epoch,
		"record_ts", before.Lease.TS, "record_ttl_ms", before.Lease.TTL, "wall_age", d.WallAge,
		"observed_unchanged", d.Observed, "head_seq", before.Head.Seq, "pending", before.Pending}
	if err := n.lease.Steal(ctx, reason); err != nil {
		n.logger.Warn("operator steal failed", append(evidence, "err", err)...)
		return fmt.Errorf("steal: %w", err)
	}
	n.logger.Warn("lease stolen by operator", append(evidence, "epoch", n.lease.Epoch())...)
	return nil
}

// LeaseHistory returns the lease events, oldest first.
func (n *Node) LeaseHistory() ([]intentlog.LeaseEvent, error) { return n.log.LeaseHistory() }

// Members returns the Raft configuration as this device sees it.
func (n *Node) Members() ([]transport.Member, error) {
	if n.cluster == nil {
		return nil, fmt.Errorf("members: %w", ErrUnsupported)
	}
	return n.cluster.Members()
}

// RemovedMember is a device removed from the cluster while this device was a member.
type RemovedMember struct {
	ID string `json:"id"`
	// ConfigIndex is the Raft index of the first configuration without it.
	ConfigIndex uint64 `json:"config_index"`
}

// RemovedMembers returns the devices removed while this device was a member (left or
// removed by another), sorted by the removal's index. Nil for a node built by New.
func (n *Node) RemovedMembers() []RemovedMember {
	if n.cluster == nil {
		return nil
	}
	out := []RemovedMember{}
	for p, idx := range n.cluster.RemovedMembers() {
		out = append(out, RemovedMember{ID: p.String(), ConfigIndex: idx})
	}
	slices.SortFunc(out, func(a, b RemovedMember) int { return cmp.Compare(a.ConfigIndex, b.ConfigIndex) })
	return out
}

// isMember reports whether id is in the Raft configuration. A device that lags may
// not have applied a recent change yet: when id is not a member locally, it catches
// up with the leader (a read barrier, bounded by ctx) and looks again.
func (n *Node) isMember(ctx context.Context, id string) bool {
	if n.isLocalMember(id) {
		return true
	}
	if err := n.prop.Sync(ctx); err != nil {
		return false
	}
	return n.isLocalMember(id)
}

func (n *Node) isLocalMember(id string) bool {
	ms, err := n.log.Members()
	if err != nil {
		return false
	}
	for _, m := range ms {
		if string(m.ID) == id {
			return true
		}
	}
	return false
}

// AddMember adds the device at addr (a p2p multiaddr with /p2p/<id>) through the
// leader, as a voter or a non-voter.
func (n *Node) AddMember(ctx context.Context, addr string, nonvoter bool) error {
	if n.cluster == nil {
		return fmt.Errorf("add member: %w", ErrUnsupported)
	}
	infos, err := transport.ParseSeeds([]string{addr})
	if err != nil || len(infos) != 1 {
		return fmt.Errorf("%w: member address %q: %v", ErrBadRequest, addr, err)
	}
	if err := n.cluster.Add(ctx, infos[0], nonvoter); err != nil {
		return fmt.Errorf("add member: %w", err)
	}
	return nil
}

// RemoveMember removes member id through the leader (Leave when id is this device).
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if n.cluster == nil {
		return fmt.Errorf("remove member: %w", ErrUnsupported)
	}
	p, err := peer.Decode(id)
	if err != nil {
		return fmt.Errorf("%w: member id %q: %w", ErrBadRequest, id, err)
	}
	if !n.isMember(ctx, id) {
		return fmt.Errorf("%w: %s is not a member", ErrNotFound, id)
	}
	if p.String() == n.id {
		return n.Leave(ctx)
	}
	if err := n.cluster.Remove(ctx, p); err != nil {
		return fmt.Errorf("remove member: %w", err)
	}
	return nil
}

// Leave removes this device from the cluster (releasing the lease first if held).
func (n *Node) Leave(ctx context.Context) error {
	if n.cluster == nil {
		return fmt.Errorf("leave: %w", ErrUnsupported)
	}
	if n.lease.Holds() {
		_ = n.lease.Release(ctx)
	}
	n.ops.leaving.Store(true)
	defer n.ops.leaving.Store(false)
	if err := n.cluster.Leave(ctx); err != nil && !n.leftAnyway() {
		return fmt.Errorf("leave: %w", err)
	}
	n.noteRemoved("left")
	return nil
}

// AllowJoin opens a join window until `until` for devices presenting token.
// The window admits one device (an invite is single-use); AllowJoins admits up to
// count. A node built by New has no join windows (it does nothing).
func (n *Node) AllowJoin(token []byte, until time.Time) { n.AllowJoins(token, until, 1) }

// AllowJoins opens a join window for up to count devices presenting token.
func (n *Node) AllowJoins(token []byte, until time.Time, count int) {
	if n.host != nil {
		n.host.AllowJoins(token, until, count)
	}
}

// Stop shuts the node down gracefully: the lease is released if held
// (bounded by ctx, or DefaultStopTimeout), then the cluster, Raft and bbolt, and the
// host close, in that order. Idempotent.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, DefaultStopTimeout)
			defer cancel()
		}
		n.batch.close()
		// The loop releases a held lease on a graceful stop (bounded by its
		// ReleaseTimeout); wait for it, but not past ctx.
		n.loopStop()
		select {
		case <-n.loopDone:
		case <-ctx.Done():
		}
		if n.lease.Holds() { // no loop (or it gave up): release here
			_ = n.lease.Release(ctx)
		}
		n.handOffLeadership(ctx)
		n.sayGoodbye(ctx)
		n.stopErr = n.shutdown(ctx)
		if !n.fence.armed.Load() {
			n.fence.applied(n.knownCommitted()) // a clean stop leaves the mark current
		}
		n.logger.Info("node stopped")
	})
	return n.stopErr
}

// Kill stops the node at once, as a crash would: no release, no goodbye. The data
// directory stays reusable by a later Start. Idempotent (with Stop too).
func (n *Node) Kill() error {
	n.stopOnce.Do(func() {
		n.killed.Store(true) // nothing more leaves this node, not even the loop's release
		n.batch.close()
		if n.closeNet != nil {
			_ = n.closeNet() // the network goes first, like a pulled cable
		}
		n.loopStop()
		ctx, cancel := context.WithTimeout(context.Background(), killWait)
		defer cancel()
		n.stopErr = n.shutdown(ctx)
		n.logger.Info("node killed")
	})
	return n.stopErr
}

// killWait bounds how long Kill waits for the signer loop to notice (a loop blocked
// in a BeforePropose knob that ignores its context is left behind, not waited for).
const killWait = 2 * time.Second

// handOffLeadership moves Raft leadership to another voter before a graceful stop,
// so the cluster does not wait an election timeout to notice the leader is gone.
func (n *Node) handOffLeadership(ctx context.Context) {
	r := n.log.Raft()
	if r.State() != raft.Leader {
		return
	}
	ms, err := n.log.Members()
	if err != nil {
		return
	}
	voters := 0
	for _, m := range ms {
		if m.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters < 2 {
		return
	}
	done := make(chan error, 1)
	go func() { done <- r.LeadershipTransfer().Error() }()
	select {
	case err := <-done:
		if err != nil {
			n.logger.Info("leadership transfer before stop failed", "err", err)
		}
	case <-ctx.Done():
	}
}

// shutdown closes everything in order: the node's context (followers, batcher),
// the cluster, Raft and bbolt (the intent log), then the host. ctx bounds the wait
// for the signer loop.
func (n *Node) shutdown(ctx context.Context) error {
	n.cancel()
	var errs []error
	select {
	case <-n.loopDone:
	case <-ctx.Done():
		n.logger.Warn("signer loop did not stop in time; closing under it")
	}
	if err := n.net.Close(); err != nil {
		errs = append(errs, fmt.Errorf("network: %w", err))
	}
	if err := n.log.Close(); err != nil {
		errs = append(errs, fmt.Errorf("intent log: %w", err))
	}
	if n.closeNet != nil {
		if err := n.closeNet(); err != nil {
			errs = append(errs, fmt.Errorf("host: %w", err))
		}
	}
	n.wg.Wait()
	return errors.Join(errs...)
}
