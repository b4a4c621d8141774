package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Protocols served by a Cluster.
const (
	// ForwardProtocol carries proposals, forwarded joins, removals and address
	// lookups between members.
	ForwardProtocol protocol.ID = "/baton/forward/1.0.0"
	// JoinProtocol is the only protocol served to non-members (during a join window).
	JoinProtocol protocol.ID = "/baton/join/1.0.0"
)

// Defaults for ClusterConfig.
const (
	DefaultProposeTimeout = 10 * time.Second
	DefaultRetryMin       = 10 * time.Millisecond
	DefaultRetryMax       = 250 * time.Millisecond
	DefaultSyncInterval   = time.Second
)

// Raft is the part of *raft.Raft the Cluster uses.
type Raft interface {
	State() raft.RaftState
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	GetConfiguration() raft.ConfigurationFuture
	LastIndex() uint64 // the local log's (see configIndex)
	AddVoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	AddNonvoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	LeadershipTransfer() raft.Future
	BootstrapCluster(configuration raft.Configuration) raft.Future
	RegisterObserver(or *raft.Observer)
	DeregisterObserver(or *raft.Observer)
}

var _ Raft = (*raft.Raft)(nil)

// ApplyFunc runs a proposal on the leader: typically raft.Apply of the entry and the
// FSM's response, encoded as bytes. It should honour ctx's deadline (pass the time
// left to raft.Apply); Propose returns at the deadline in any case. It must return an error matching raft.ErrNotLeader,
// raft.ErrLeadershipLost or ErrNotLeader when this node is (no longer) the leader, so
// forwarding retries at the new leader. Entries are opaque to the transport and may be
// retried after ErrLeadershipLost, so they must be idempotent (baton's are: intents
// dedupe by ID, lease entries compare-and-set).
type ApplyFunc func(ctx context.Context, entry []byte) ([]byte, error)

// ClusterConfig tunes a Cluster. Every field is optional.
type ClusterConfig struct {
	// ProposeTimeout bounds Propose, Join, Leave and Remove when the caller's context
	// has no deadline. Defaults to DefaultProposeTimeout.
	ProposeTimeout time.Duration
	// RetryMin and RetryMax bound the exponential backoff between attempts while the
	// leader is unknown or changing.
	RetryMin, RetryMax time.Duration
	// SyncInterval is how often the Raft configuration is re-read to keep the gater
	// and the address book in sync (changes observed through raft observers are
	// applied at once). Defaults to DefaultSyncInterval.
	SyncInterval time.Duration
	// MaxFrameSize bounds a forwarded entry or result. Defaults to DefaultMaxFrameSize.
	MaxFrameSize int
	// Logger defaults to the Host's logger.
	Logger *slog.Logger

	// Barrier serves Cluster.Barrier on the leader: a Raft read barrier
	// (raft.Barrier), then the leader's applied index, the index a follower waits
	// to have applied locally before it reads. It should honour ctx's deadline. Like
	// ApplyFunc, it must return an error matching raft.ErrNotLeader,
	// raft.ErrLeadershipLost or ErrNotLeader when this node is not (or no longer)
	// the leader, so that the barrier is retried at the new leader. Optional: without
	// it, Cluster.Barrier fails with ErrNoHandler when this node is the leader.
	Barrier func(ctx context.Context) (uint64, error)

	// OnCall serves Cluster.Call requests addressed to this device by another member
	// (or by this device itself). from is the caller's peer ID (authenticated by the
	// connection's Noise handshake; only members reach the handler). ctx ends at the
	// caller's deadline. A returned error reaches the caller as a *RemoteError with
	// Call set (its text only). Optional: without it, calls are refused with
	// ErrNoHandler. It runs concurrently for concurrent calls.
	OnCall func(ctx context.Context, from peer.ID, payload []byte) ([]byte, error)
	// KeepMembers, if set and true, keeps the address book from being pruned to the
	// Raft configuration: this device knows its configuration is stale (a restored
	// copy from before some members joined: they hold the history it must catch up
	// with, and a pruned book would refuse them).
	KeepMembers func() bool
}

// Cluster forwards proposals and membership changes to the Raft leader over libp2p
// and keeps the Host's gater and address book in sync with the Raft configuration.
// All methods are safe for concurrent use.
type Cluster struct {
	h     *Host
	r     Raft
	apply ApplyFunc
	cfg   ClusterConfig
	log   *slog.Logger

	obsCh    chan raft.Observation
	obs      *raft.Observer
	syncKick chan struct{}

	removedNotice atomic.Pointer[removedNotice] // removed_members.go
	stopRemoved   func()

	leaderMu sync.Mutex
	leaderCh chan struct{} // closed and replaced whenever the local Raft's leader changes

	pendingMu sync.Mutex
	pending   map[peer.ID]int    // joins in progress on this leader: keep them in the book
	dropLater map[peer.ID]uint64 // removed members -> tick generation when removed
	dropGen   uint64             // incremented on every SyncInterval tick

	left atomic.Bool // Leave succeeded: stop syncing from the (now stale) configuration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewCluster registers the forward and join protocol handlers on h and starts the
// membership sync. r is normally the *raft.Raft built on h.RaftTransport; apply runs
// proposals when this node is the leader.
func NewCluster(h *Host, r Raft, apply ApplyFunc, cfg ClusterConfig) (*Cluster, error) {
	if h == nil || r == nil || apply == nil {
		return nil, errors.New("transport: NewCluster needs a host, a raft and an apply function")
	}
	if cfg.ProposeTimeout <= 0 {
		cfg.ProposeTimeout = DefaultProposeTimeout
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(DefaultRetryMax, cfg.RetryMin)
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.Logger == nil {
		cfg.Logger = h.log
	}
	ctx, cancel := context.WithCancel(h.ctx)
	c := &Cluster{
		h: h, r: r, apply: apply, cfg: cfg, log: cfg.Logger,
		obsCh:     make(chan raft.Observation, 16),
		syncKick:  make(chan struct{}, 1),
		pending:   map[peer.ID]int{},
		dropLater: map[peer.ID]uint64{},
		leaderCh:  make(chan struct{}),
		ctx:       ctx, cancel: cancel,
	}
	// The filter runs synchronously in Raft's observe (after the new leader is
	// visible through LeaderWithID), so leader changes are signalled even when the
	// buffered observation channel is full and the observation itself is dropped.
	c.obs = raft.NewObserver(c.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation:
			c.leaderChanged()
			return true
		case raft.PeerObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(c.obs)
	// Raft closes its transport only after all its goroutines have returned, and one
	// blocked on a write to a frozen peer held raft.Shutdown for tens of seconds: end
	// the Raft streams as soon as Shutdown starts (the filter runs inside it). This
	// observer outlives Close, which comes before raft.Shutdown.
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if st, ok := o.Data.(raft.RaftState); ok && st == raft.Shutdown {
			h.abortRaft()
		}
		return false
	}))
	h.h.SetStreamHandler(ForwardProtocol, c.handleForward)
	h.h.SetStreamHandler(JoinProtocol, c.handleJoinStream)
	if err := c.startRemovedNotices(); err != nil {
		cancel()
		return nil, err
	}
	c.wg.Add(1)
	go c.syncLoop()
	return c, nil
}

// Close removes the protocol handlers and stops the sync loop. It does not close the
// Host or Raft. Idempotent.
func (c *Cluster) Close() error {
	c.once.Do(func() {
		c.h.h.RemoveStreamHandler(ForwardProtocol)
		c.h.h.RemoveStreamHandler(JoinProtocol)
		c.h.h.RemoveStreamHandler(RemovedProtocol)
		c.stopRemoved()
		c.r.DeregisterObserver(c.obs)
		c.cancel()
		c.wg.Wait()
	})
	return nil
}

// Bootstrap makes this device the single voter of a new cluster (first start of the
// first device). It fails with raft.ErrCantBootstrap when Raft already has state.
func (c *Cluster) Bootstrap() error {
	id := raft.ServerID(c.h.ID().String())
	err := c.r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: id, Address: raft.ServerAddress(id),
	}}}).Error()
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// Leader returns the current leader's peer ID as known locally ("" if unknown).
func (c *Cluster) Leader() peer.ID {
	_, id := c.r.LeaderWithID()
	if id == "" {
		return ""
	}
	p, err := peer.Decode(string(id))
	if err != nil {
		return ""
	}
	return p
}

// leaderWatch returns a channel that is closed at the next change of the local Raft's
// leader (to another peer or to none). Take it before reading the leader.
func (c *Cluster) leaderWatch() <-chan struct{} {
	c.leaderMu.Lock()
	defer c.leaderMu.Unlock()
	return c.leaderCh
}

// leaderChanged wakes every leaderWatch. Called from Raft's observer filter: it must
// not block.
func (c *Cluster) leaderChanged() {
	c.leaderMu.Lock()
	close(c.leaderCh)
	c.leaderCh = make(chan struct{})
	c.leaderMu.Unlock()
}

// withDeadline applies ProposeTimeout when ctx has no deadline.
func (c *Cluster) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.ProposeTimeout)
}

// backoff waits d (doubling it for the next call, up to RetryMax) or until ctx ends.
func (c *Cluster) backoff(ctx context.Context, d *time.Duration) bool {
	t := time.NewTimer(*d)
	defer t.Stop()
	*d = min(*d*2, c.cfg.RetryMax)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.ctx.Done():
		return false
	}
}
