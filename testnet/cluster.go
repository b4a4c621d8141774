package testnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// Defaults for Config fields left zero.
const (
	DefaultNodes       = 3
	DefaultTTL         = time.Second
	DefaultTick        = 100 * time.Millisecond
	DefaultSampleEvery = 20 * time.Millisecond
	MaxNodes           = 7
	// FastRaftTimeout is FastRaft's heartbeat and election timeout.
	FastRaftTimeout = 250 * time.Millisecond
)

// FastRaft shortens Raft's timeouts for drills on one machine (loopback round trips
// are sub-millisecond; 250 ms keeps a loaded 2-core machine from flapping).
func FastRaft(c *raft.Config) {
	c.HeartbeatTimeout = FastRaftTimeout
	c.ElectionTimeout = FastRaftTimeout
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
}

// Config configures a Cluster.
type Config struct {
	Nodes int           // devices at Start, 1-7 (default 3)
	TTL   time.Duration // lease TTL of every device (default 1 s)
	Tick  time.Duration // signer loop tick (default 100 ms)
	// Dir holds one data dir per device (d0, d1, ...). Default: a new temp dir,
	// removed by Close.
	Dir string
	// Raft adjusts each device's raft.Config. Default FastRaft.
	Raft func(*raft.Config)
	// RaftTimeout is Raft's election timeout as Raft sets it (for the failover
	// bound); default FastRaftTimeout. Set it with Raft.
	RaftTimeout time.Duration
	// API also serves each device's local HTTP API on <dir>/baton.sock.
	API bool
	// Logger for the nodes. Default: discard.
	Logger *slog.Logger
	// SampleEvery is the timeline recorder's sampling period (default 20 ms; < 0:
	// no timeline, for measurements the sampling would disturb).
	SampleEvery time.Duration
	// OnEvent, optional, is called for every timeline event (progress output).
	OnEvent func(Event)
	// OnHold, optional, is called when a device starts holding the lease (as the
	// recorder samples it).
	OnHold func(d *Device, epoch uint64)
	// Format is the chain's commit format: "" or "baton" (an Ed25519 chain key) or
	// "atproto" (a P-256 key: the genesis declares an atproto repository).
	Format string
}

func (cfg *Config) defaults() error {
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return fmt.Errorf("%w: %d devices (1-%d)", ErrBadConfig, cfg.Nodes, MaxNodes)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.TTL <= 0 || cfg.Tick <= 0 || cfg.Tick >= cfg.TTL {
		return fmt.Errorf("%w: need 0 < tick < ttl (tick %s, ttl %s)", ErrBadConfig, cfg.Tick, cfg.TTL)
	}
	if cfg.Raft == nil {
		cfg.Raft, cfg.RaftTimeout = FastRaft, FastRaftTimeout
	}
	if cfg.RaftTimeout == 0 {
		cfg.RaftTimeout = FastRaftTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if _, err := chainKeyGen(cfg.Format); err != nil {
		return err
	}
	return nil
}

// Cluster is a Net of node.Node devices in this process over real libp2p on
// 127.0.0.1, each with its own data dir, TTL, tick and Clock, sharing one chain key
// and network key. It records a timeline (lease holds, Raft leaders, the chain's
// growth, faults) for the drill report.
type Cluster struct {
	*netBase
	cfg Config
	key chain.Key
	psk pnet.PSK
	tmp bool

	blocks map[[2]int]bool // cut pairs (i<j), under netBase.mu
}

// NewCluster prepares a cluster (keys, data dirs); Start starts it.
func NewCluster(cfg Config) (*Cluster, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, blocks: map[[2]int]bool{},
		netBase: newBase(KindInProcess, cfg.TTL, cfg.Tick, 2*cfg.RaftTimeout, cfg.OnEvent)}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "baton-testnet-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		c.cfg.Dir, c.tmp = dir, true
	}
	var err error
	gen, _ := chainKeyGen(cfg.Format)
	if c.key, err = gen(); err != nil {
		return nil, fmt.Errorf("chain key: %w", err)
	}
	if c.psk, err = transport.GeneratePSK(); err != nil {
		return nil, fmt.Errorf("network key: %w", err)
	}
	c.setChain(c.key.DID())
	c.state = func(d *Device) (node.State, bool) {
		if n := d.Node(); n != nil && !d.Paused() {
			return n.State(), true
		}
		return node.State{}, false
	}
	c.target = func(d *Device) Submitter {
		if n := d.Node(); n != nil {
			return n
		}
		return nil
	}
	c.readLog = func(d *Device, from uint64, fn func(intentlog.RaftEntry) error) (bool, error) {
		if n := d.Node(); n != nil {
			return true, n.Log().ForEachEntry(from, fn)
		}
		if _, err := os.Stat(filepath.Join(d.Dir, intentlog.RaftFile)); err != nil {
			return false, nil
		}
		return true, intentlog.ReadRaftLog(d.Dir, from, fn)
	}
	for i := 0; i < cfg.Nodes; i++ {
		d := c.addSlot(c.cfg.Dir, NewClock())
		d.gate = newGate()
	}
	return c, nil
}

// Key returns the chain key (every device signs with it): Ed25519, or P-256 on an
// atproto chain.
func (c *Cluster) Key() chain.Key { return c.key }

// Nodes returns the running nodes (paused ones included).
func (c *Cluster) Nodes() []*node.Node {
	var out []*node.Node
	for _, d := range c.Devices() {
		if n := d.Node(); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// Start starts every device: d0 bootstraps, the others join through it one by one,
// and the timeline recorder starts.
func (c *Cluster) Start(ctx context.Context) error {
	var onHold func(string, uint64)
	if c.cfg.OnHold != nil {
		onHold = func(name string, epoch uint64) {
			for _, d := range c.Devices() {
				if d.Name == name {
					c.cfg.OnHold(d, epoch)
				}
			}
		}
	}
	c.startRecorder(c.cfg.SampleEvery, onHold)
	for _, d := range c.Devices() {
		if err := c.startDevice(ctx, d, d.Index == 0); err != nil {
			return err
		}
	}
	return nil
}

// stopAll stops every running device gracefully, the lease holder first (so that
// its release reaches a quorum), each Stop bounded by 2×TTL (the last devices may
// have no quorum left to release with).
func (c *Cluster) stopAll(ctx context.Context) error {
	var errs []error
	devs := c.Devices()
	if h, _, ok := c.Holder(); ok {
		devs = append([]*Device{h}, devs...)
	}
	for _, d := range devs {
		d.gate.resume() // a paused device must be able to stop
		d.Clock.Resume(false)
		n := c.detach(d)
		if n == nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*c.cfg.TTL)
		err := n.Stop(sctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", d.Label(), err))
		}
	}
	c.stopRecorder()
	return errors.Join(errs...)
}

// Close stops the cluster if needed and removes its data dirs if they were a temp dir.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.stopAll(ctx)
	if c.tmp {
		if rerr := os.RemoveAll(c.cfg.Dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// detach marks d down and returns its node (nil if it was down).
func (c *Cluster) detach(d *Device) *node.Node {
	d.mu.Lock()
	n, stopAPI, stopFollow := d.node, d.apiStop, d.stopFollow
	d.node, d.apiStop, d.stopFollow = nil, nil, nil
	d.mu.Unlock()
	if stopFollow != nil {
		stopFollow()
	}
	if stopAPI != nil {
		stopAPI()
	}
	return n
}

// startDevice starts d's node: bootstrap, join through the running members, or
// (with existing state) rejoin.
func (c *Cluster) startDevice(ctx context.Context, d *Device, bootstrap bool) error {
	d.mu.Lock()
	port := d.port
	d.mu.Unlock()
	listen := func(p int) []string { return []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(p)} }
	cfg := node.Config{DataDir: d.Dir, ListenAddrs: listen(port), PSK: c.psk, ChainKey: c.key,
		Bootstrap: bootstrap, TTL: c.cfg.TTL, Tick: c.cfg.Tick, Clock: d.Clock,
		Logger: c.cfg.Logger.With("device", d.Name), Raft: c.cfg.Raft,
		Knobs: &knobs.Node{BeforePropose: func(ctx context.Context, e any) context.Context { return d.gate.wait(ctx, e.(intentlog.Entry)) }}}
	if _, err := os.Stat(filepath.Join(d.Dir, intentlog.RaftFile)); err != nil && !bootstrap {
		token := make([]byte, 16)
		_, _ = rand.Read(token)
		var seeds []string
		for _, o := range c.Devices() {
			if n := o.Node(); n != nil && o != d && !o.Paused() {
				n.AllowJoin(token, time.Now().Add(time.Minute))
				seeds = append(seeds, n.Addrs()...)
			}
		}
		if len(seeds) == 0 {
			return fmt.Errorf("start %s: %w: no running member to join through", d.Name, ErrNoDevice)
		}
		cfg.Join = &node.JoinConfig{Seeds: seeds, Token: token}
	}
	n, err := node.Start(ctx, cfg)
	if err != nil && port != 0 && strings.Contains(err.Error(), "address already in use") {
		// Someone took the port while the device was down: a new one (the others
		// learn it when the device dials them).
		cfg.ListenAddrs = listen(0)
		n, err = node.Start(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	var stopAPI func()
	if c.cfg.API {
		srv, err := api.Start(n, api.Config{Socket: filepath.Join(d.Dir, api.SocketFile), Logger: cfg.Logger})
		if err != nil {
			_ = n.Kill()
			return fmt.Errorf("start %s: api: %w", d.Name, err)
		}
		stopAPI = func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			srv.Close(ctx)
		}
	}
	fctx, stopFollow := context.WithCancel(context.Background())
	d.mu.Lock()
	d.node, d.id, d.stopFollow, d.apiStop, d.started = n, n.ID(), stopFollow, stopAPI, true
	d.port = portOf(n.Host().AddrInfo())
	d.mu.Unlock()
	go c.follow(fctx, n)
	c.applyBlocks()
	return nil
}

func portOf(ai peer.AddrInfo) int {
	for _, a := range ai.Addrs {
		if p, err := a.ValueForProtocol(0x06); err == nil { // tcp
			if v, err := strconv.Atoi(p); err == nil {
				return v
			}
		}
	}
	return 0
}

// Leader returns the device that is Raft leader according to a running, unpaused
// device that sees itself as leader.
func (c *Cluster) Leader() (*Device, bool) {
	for _, d := range c.Devices() {
		if n := d.Node(); n != nil && !d.Paused() && n.Log().Raft().State() == raft.Leader {
			return d, true
		}
	}
	return nil, false
}

// WaitLeader waits for a Raft leader.
func (c *Cluster) WaitLeader(ctx context.Context) (*Device, error) {
	var l *Device
	err := wait.Until(ctx, "a raft leader", func() bool {
		var ok bool
		l, ok = c.Leader()
		return ok
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return l, nil
}

// Chains reads every running device's applied chain, seq 1 to its head.
func (c *Cluster) Chains() ([]DeviceChain, error) {
	var out []DeviceChain
	for _, d := range c.Devices() {
		n := d.Node()
		if n == nil {
			continue
		}
		dc := DeviceChain{Device: d.Name}
		read := func() error {
			v := n.Log().View()
			dc.Applied = v.AppliedIndex
			for s := uint64(len(dc.Commits)) + 1; s <= v.Head.Seq; s++ {
				raw, err := n.Log().Commit(s)
				if err != nil {
					return fmt.Errorf("%s: commit %d: %w", d.Label(), s, err)
				}
				dc.Commits = append(dc.Commits, raw)
			}
			return nil
		}
		var err error
		if FormatOf(c.Chain()).ID() == chain.FormatAtproto {
			err = readRepo(n, &dc, read) // and the repository head with it
		} else {
			err = read()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, dc)
	}
	return out, nil
}

// Rejections returns the apply's refusals by reason, the most any running replica
// counted (a replica restored from a snapshot may have counted fewer).
func (c *Cluster) Rejections() map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range c.Nodes() {
		for r, k := range n.Log().Rejections() {
			if k > out[string(r)] {
				out[string(r)] = k
			}
		}
	}
	return out
}

// Collect reads the chains and rejection counters, stops the cluster and reads every
// device's Raft log from disk.
func (c *Cluster) Collect(ctx context.Context) (CheckInput, error) {
	in := CheckInput{Chain: c.Chain(), Observed: c.observed(), Names: names(c.Devices())}
	chains, err := c.Chains()
	in.Devices = chains
	in.Rejections = c.Rejections()
	if serr := c.stopAll(ctx); serr != nil && err == nil {
		err = serr
	}
	c.Harvest()
	sg := c.sigs.signatures()
	in.Signatures = &sg
	return in, err
}

// names maps the devices' peer IDs to their labels.
func names(ds []*Device) map[string]string {
	m := map[string]string{}
	for _, d := range ds {
		if id := d.ID(); id != "" {
			m[id] = d.Label()
		}
	}
	return m
}

// Check runs the checker over every running device's chain and the given acks, with
// failover times from the recorder's observations (the Raft logs are not read: use
// Collect for that).
func (c *Cluster) Check(acks []Ack) (CheckResult, error) {
	chains, err := c.Chains()
	if err != nil {
		return CheckResult{}, err
	}
	return Check(CheckInput{Chain: c.Chain(), Devices: chains, Acked: acks, Observed: c.observed(),
		Rejections: c.Rejections(), Names: names(c.Devices())}), nil
}
