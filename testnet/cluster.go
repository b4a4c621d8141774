package testnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
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
)

// FastRaft shortens Raft's timeouts for drills on one machine (loopback round trips
// are sub-millisecond; 250 ms keeps a loaded 2-core machine from flapping).
func FastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 250 * time.Millisecond
	c.ElectionTimeout = 250 * time.Millisecond
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
	// Logger for the nodes. Default: discard.
	Logger *slog.Logger
	// SampleEvery is the timeline recorder's sampling period (default 20 ms).
	SampleEvery time.Duration
	// OnEvent, optional, is called for every timeline event (progress output).
	OnEvent func(Event)
}

// Device is one device of a Cluster: its data dir, its clock and (while running) its
// node.Node. Its methods are safe for concurrent use.
type Device struct {
	Name  string
	Index int
	Dir   string
	Clock *Clock

	c    *Cluster
	mu   sync.Mutex
	node *node.Node
	id   string
	port int
	gate *gate
	left bool // left the cluster for good
	// stopFollow ends the recorder's commit follower of the current node.
	stopFollow context.CancelFunc
}

// detach marks d down and returns its node (nil if it was down).
func (d *Device) detach() *node.Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.node
	d.node = nil
	if d.stopFollow != nil {
		d.stopFollow()
		d.stopFollow = nil
	}
	return n
}

// Node returns the running node, or nil while the device is down.
func (d *Device) Node() *node.Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.node
}

// ID returns the device's libp2p peer ID (stable across restarts).
func (d *Device) ID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.id
}

// Running reports whether the device's node is up (it may be paused).
func (d *Device) Running() bool { return d.Node() != nil }

// Paused reports whether the device is frozen.
func (d *Device) Paused() bool { return d.gate.paused() }

// Cluster is N devices running node.Node over real libp2p on 127.0.0.1, each with
// its own data dir, TTL, tick and Clock, sharing one chain key and network key. It
// records a timeline (lease holds, Raft leaders, the chain's growth, faults) for the
// drill report.
type Cluster struct {
	cfg     Config
	key     *chain.Ed25519Key
	psk     pnet.PSK
	tmp     bool
	started time.Time

	mu      sync.Mutex
	devices []*Device
	blocks  map[[2]int]bool // partition pairs (i<j) currently cut
	rec     *recorder
	stopRec context.CancelFunc
	recDone chan struct{}
}

// NewCluster prepares a cluster (keys, data dirs); Start starts it.
func NewCluster(cfg Config) (*Cluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return nil, fmt.Errorf("%w: %d devices (1-%d)", ErrBadConfig, cfg.Nodes, MaxNodes)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.TTL <= 0 || cfg.Tick <= 0 || cfg.Tick >= cfg.TTL {
		return nil, fmt.Errorf("%w: need 0 < tick < ttl (tick %s, ttl %s)", ErrBadConfig, cfg.Tick, cfg.TTL)
	}
	if cfg.Raft == nil {
		cfg.Raft = FastRaft
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	c := &Cluster{cfg: cfg, blocks: map[[2]int]bool{}}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "baton-testnet-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		c.cfg.Dir, c.tmp = dir, true
	}
	var err error
	if c.key, err = chain.GenerateKey(rand.Reader); err != nil {
		return nil, fmt.Errorf("chain key: %w", err)
	}
	if c.psk, err = transport.GeneratePSK(); err != nil {
		return nil, fmt.Errorf("network key: %w", err)
	}
	for i := 0; i < cfg.Nodes; i++ {
		c.newDevice()
	}
	c.rec = newRecorder(cfg.SampleEvery, func() []sampled {
		var out []sampled
		for _, d := range c.Devices() {
			s := sampled{name: d.Name}
			if n := d.Node(); n != nil && !d.Paused() {
				st := n.State()
				s.st = &st
			}
			out = append(out, s)
		}
		return out
	})
	return c, nil
}

func (c *Cluster) newDevice() *Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.devices)
	d := &Device{Name: "d" + strconv.Itoa(i), Index: i, Dir: filepath.Join(c.cfg.Dir, "d"+strconv.Itoa(i)),
		Clock: NewClock(), c: c, gate: newGate()}
	c.devices = append(c.devices, d)
	return d
}

// Chain returns the chain's did:key.
func (c *Cluster) Chain() string { return c.key.DID() }

// TTL and Tick return the cluster's lease TTL and signer tick.
func (c *Cluster) TTL() time.Duration  { return c.cfg.TTL }
func (c *Cluster) Tick() time.Duration { return c.cfg.Tick }

// Devices returns every device ever added, in order (some may be down or gone).
func (c *Cluster) Devices() []*Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Device(nil), c.devices...)
}

// Device returns device i.
func (c *Cluster) Device(i int) (*Device, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.devices) {
		return nil, fmt.Errorf("%w: device %d", ErrNoDevice, i)
	}
	return c.devices[i], nil
}

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
	c.started = time.Now()
	c.recDone = make(chan struct{})
	rctx, cancel := context.WithCancel(context.Background())
	c.stopRec = cancel
	go func() {
		defer close(c.recDone)
		c.rec.run(rctx)
	}()
	for _, d := range c.Devices() {
		if err := c.startDevice(ctx, d, d.Index == 0); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every running device gracefully, the lease holder first (so that its
// release reaches a quorum), each Stop bounded by 2×TTL (the last devices may have
// no quorum left to release with), then the recorder. Close removes a temp dir.
func (c *Cluster) Stop(ctx context.Context) error {
	var errs []error
	devs := c.Devices()
	if h, _, ok := c.Holder(); ok {
		devs = append([]*Device{h}, devs...)
	}
	for _, d := range devs {
		d.gate.resume() // a paused device must be able to stop
		d.Clock.Resume()
		n := d.detach()
		if n == nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*c.cfg.TTL)
		err := n.Stop(sctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", d.Name, err))
		}
	}
	if c.stopRec != nil {
		c.stopRec()
		<-c.recDone
		c.stopRec = nil
	}
	return errors.Join(errs...)
}

// Close stops the cluster if needed and removes its data dirs if they were a temp dir.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Stop(ctx)
	if c.tmp {
		if rerr := os.RemoveAll(c.cfg.Dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func (c *Cluster) listenAddrs(d *Device) []string {
	d.mu.Lock()
	port := d.port
	d.mu.Unlock()
	return []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(port)}
}

// startDevice starts d's node: bootstrap, join through the running members, or
// (with existing state) rejoin.
func (c *Cluster) startDevice(ctx context.Context, d *Device, bootstrap bool) error {
	cfg := node.Config{DataDir: d.Dir, ListenAddrs: c.listenAddrs(d), PSK: c.psk, ChainKey: c.key,
		Bootstrap: bootstrap, TTL: c.cfg.TTL, Tick: c.cfg.Tick, Clock: d.Clock,
		Logger: c.cfg.Logger.With("device", d.Name), Raft: c.cfg.Raft,
		Knobs: &knobs.Node{BeforePropose: func(ctx context.Context, e any) { d.gate.wait(ctx, e.(intentlog.Entry)) }}}
	fresh := true
	if _, err := os.Stat(filepath.Join(d.Dir, "raft.db")); err == nil {
		fresh = false
	}
	if fresh && !bootstrap {
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
	if err != nil && d.port != 0 && strings.Contains(err.Error(), "address already in use") {
		d.mu.Lock()
		d.port = 0 // someone took the port while the device was down
		d.mu.Unlock()
		cfg.ListenAddrs = c.listenAddrs(d)
		n, err = node.Start(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	fctx, stopFollow := context.WithCancel(context.Background())
	d.mu.Lock()
	d.node, d.id, d.stopFollow = n, n.ID(), stopFollow
	if d.port == 0 {
		d.port = portOf(n.Host().AddrInfo())
	}
	d.mu.Unlock()
	go c.rec.follow(fctx, n)
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
		if n := d.Node(); n != nil && !d.Paused() && n.State().Raft.Role == raft.Leader.String() {
			return d, true
		}
	}
	return nil, false
}

// Holder returns the device that holds the lease and may sign now (by its own
// replica and clock), with the epoch; paused devices are not asked.
func (c *Cluster) Holder() (*Device, uint64, bool) {
	for _, d := range c.Devices() {
		if n := d.Node(); n != nil && !d.Paused() {
			if st := n.State(); st.Lease.HeldByMe {
				return d, st.Lease.Epoch, true
			}
		}
	}
	return nil, 0, false
}

// WaitHolder waits until some unpaused device holds the lease at an epoch above
// minEpoch and is not one of the excluded devices.
func (c *Cluster) WaitHolder(ctx context.Context, minEpoch uint64, exclude ...*Device) (*Device, uint64, error) {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		if d, ep, ok := c.Holder(); ok && ep > minEpoch && !contains(exclude, d) {
			return d, ep, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("wait for a holder above epoch %d: %w", minEpoch, ErrTimeout)
		case <-tk.C:
		}
	}
}

func contains(ds []*Device, d *Device) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// WaitConverged waits until every running, unpaused device has applied the same
// non-empty head with nothing pending (every acknowledged intent signed), and at
// least minSeq commits.
func (c *Cluster) WaitConverged(ctx context.Context, minSeq uint64) error {
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	var last string
	for {
		ok, why := c.converged(minSeq)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for convergence (%s): %w", last, ErrTimeout)
		case <-tk.C:
		}
	}
}

func (c *Cluster) converged(minSeq uint64) (bool, string) {
	var head string
	var seq uint64
	n := 0
	for _, d := range c.Devices() {
		nd := d.Node()
		if nd == nil || d.Paused() {
			continue
		}
		st := nd.State()
		n++
		if st.Pending > 0 {
			return false, fmt.Sprintf("%s has %d pending", d.Name, st.Pending)
		}
		if head == "" {
			head, seq = st.Head.Hash, st.Head.Seq
		} else if st.Head.Hash != head {
			return false, fmt.Sprintf("%s at seq %d, others at %d", d.Name, st.Head.Seq, seq)
		}
	}
	if n == 0 {
		return false, "no device running"
	}
	if seq < minSeq {
		return false, fmt.Sprintf("head seq %d < %d", seq, minSeq)
	}
	return true, ""
}

// Chains reads every running device's applied chain, seq 1 to its head.
func (c *Cluster) Chains() ([]DeviceChain, error) {
	var out []DeviceChain
	for _, d := range c.Devices() {
		n := d.Node()
		if n == nil {
			continue
		}
		head := n.Log().View().Head.Seq
		dc := DeviceChain{Device: d.Name}
		for s := uint64(1); s <= head; s++ {
			raw, err := n.Log().Commit(s)
			if err != nil {
				return nil, fmt.Errorf("%s: commit %d: %w", d.Name, s, err)
			}
			dc.Commits = append(dc.Commits, raw)
		}
		out = append(out, dc)
	}
	return out, nil
}

// Check runs the checker over every running device's chain and the given acks,
// with failover times from the recorder's observations.
func (c *Cluster) Check(acks []Ack) (CheckResult, error) {
	chains, err := c.Chains()
	if err != nil {
		return CheckResult{}, err
	}
	return Check(CheckInput{Chain: c.Chain(), Devices: chains, Acked: acks, Observed: c.rec.observed()}), nil
}

// Event records a timeline event (and reports it through Config.OnEvent).
func (c *Cluster) Event(d *Device, kind, label string) {
	e := Event{At: time.Now(), Kind: kind, Label: label}
	if d != nil {
		e.Device = d.Name
	}
	c.rec.event(e)
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(e)
	}
}

// Timeline fills r's devices, events, holds, leaders and growth from the recorder.
func (c *Cluster) Timeline(r *Report) {
	for _, d := range c.Devices() {
		r.Devices = append(r.Devices, DeviceInfo{Name: d.Name, ID: d.ID()})
	}
	c.rec.fill(r)
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
