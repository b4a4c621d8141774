package testnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// Kinds of Net.
const (
	KindInProcess = "in-process" // Cluster: node.Node in this process
	KindProcs     = "procs"      // ProcCluster: real `baton run` processes
)

// Net is a test network of baton devices sharing one chain: in this process
// (Cluster) or as real `baton run` processes (ProcCluster). Drills, the bench and the
// demo are written against it. Every fault and recovery is recorded on the timeline
// (Event) and reported through the config's OnEvent. Methods are safe for concurrent
// use; a device's faults must not race each other (a drill injects one at a time).
//
// Capabilities that only one kind has are separate interfaces: Partitioner and
// ClockControl (in-process only).
type Net interface {
	Kind() string
	// Chain is the chain's did:key (known after Start for processes).
	Chain() string
	TTL() time.Duration
	Tick() time.Duration
	// Election is the allowance for one Raft election in failover bounds: twice the
	// election timeout (raft randomises it between one and two).
	Election() time.Duration
	// Devices returns every slot, in order (some may be down, paused or left).
	Devices() []*Device

	// Start starts every device: d0 bootstraps, the others join one by one.
	Start(ctx context.Context) error
	// Close stops what still runs (holder first, gracefully) and removes a temporary
	// directory.
	Close() error

	// State is a device's view (nil-safe: false while down, paused or unreachable).
	// It never blocks for long: a frozen process does not answer.
	State(d *Device) (node.State, bool)
	Holder() (*Device, uint64, bool)
	WaitHolder(ctx context.Context, minEpoch uint64, exclude ...*Device) (*Device, uint64, error)
	WaitConverged(ctx context.Context, minSeq uint64) error
	// LoadTargets lists the running, unpaused devices a load generator may submit to.
	LoadTargets() func() []Target
	// DeviceTarget is LoadTargets over d alone.
	DeviceTarget(d *Device) func() []Target

	// Kill crashes d (no release: Node.Kill, kill -9); its data dir stays.
	Kill(d *Device) error
	// Pause freezes d (in-process: network cut, proposals parked, clock stopped;
	// a process: SIGSTOP); Resume undoes it.
	Pause(d *Device) error
	Resume(d *Device) error
	// Stop stops d gracefully (Node.Stop, SIGTERM): a held lease is released.
	Stop(ctx context.Context, d *Device) error
	// Restart starts a stopped or killed d again from its data dir, same port.
	Restart(ctx context.Context, d *Device) error
	// Leave removes d from the cluster (Raft configuration) and stops it; Rejoin
	// brings the same slot back as an operator re-adds a device: its replicated
	// state wiped (its keys kept), then a join through a fresh join window.
	Leave(ctx context.Context, d *Device) error
	Rejoin(ctx context.Context, d *Device) error
	// Release and Transfer are the holder's graceful handovers.
	Release(ctx context.Context, d *Device) error
	Transfer(ctx context.Context, d, to *Device) error

	// Event records a timeline event (a note, a fault injected from outside).
	Event(d *Device, kind, label string)
	// Harvest reads the Raft logs it can read now (running in-process devices, and
	// any device that is down) into the signature book, from where it read last.
	Harvest()
	// Collect reads everything the checker needs: every device's applied chain (the
	// devices must be running), the apply's rejection counters, then stops the
	// network and reads every device's Raft log from disk. After it the net is down.
	Collect(ctx context.Context) (CheckInput, error)
	// Timeline fills r's devices, events, holds, leaders, growth and down spans.
	Timeline(r *Report)
	// FirstCommit is when the timeline first saw a commit of epoch applied on any
	// device (false without a timeline or before one was seen).
	FirstCommit(epoch uint64) (time.Time, bool)
}

// Partitioner cuts links between devices (in-process only: Host.Block). A libp2p
// connection carries both directions, so cuts are always symmetric; a partial
// partition cuts some pairs and keeps others (A and B both reach C, not each other).
type Partitioner interface {
	Partition(groups ...[]*Device)
	Cut(pairs ...[2]*Device)
	Heal()
}

// ClockControl skews and drifts a device's clock (in-process only).
type ClockControl interface {
	Skew(d *Device, offset time.Duration)
	Drift(d *Device, rate float64)
}

var (
	_ Net          = (*Cluster)(nil)
	_ Partitioner  = (*Cluster)(nil)
	_ ClockControl = (*Cluster)(nil)
	_ Net          = (*ProcCluster)(nil)
)

// Device is one slot of a Net: a name, a data dir and, while it runs, a node (in this
// process) or a process. Its methods are safe for concurrent use.
type Device struct {
	Name  string // d0, d1, ...: the slot
	Index int
	Dir   string
	// Clock is an in-process device's controllable clock (nil for a process).
	Clock *Clock

	mu       sync.Mutex
	id       string
	left     bool   // removed from the cluster (until Rejoin)
	started  bool   // has run at least once
	raftNext uint64 // next Raft index to harvest

	// in-process
	node       *node.Node
	apiStop    func()
	port       int
	gate       *gate
	stopFollow context.CancelFunc

	// process
	proc *proc
}

// ID returns the device's libp2p peer ID ("" before its first start).
func (d *Device) ID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.id
}

// Label is the device's name everywhere in drills, reports and the demo: its short
// name and the end of its peer ID, e.g. "d1 (…aN1816)". Every ed25519 peer ID starts
// with 12D3KooW, so the end is the part that tells devices apart.
func (d *Device) Label() string { return deviceLabel(d.Name, d.ID()) }

func deviceLabel(name, id string) string {
	if id == "" {
		return name
	}
	return name + " (" + shortID(id) + ")"
}

// shortID is the end of a peer ID, "…" and its last six characters.
func shortID(id string) string {
	if len(id) > 10 {
		return "…" + id[len(id)-6:]
	}
	return id
}

// Node returns an in-process device's running node, or nil (down, or a process).
func (d *Device) Node() *node.Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.node
}

// Left reports whether the device left the cluster (and has not rejoined).
func (d *Device) Left() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.left
}

// Running reports whether the device is up (it may be paused).
func (d *Device) Running() bool {
	d.mu.Lock()
	n, p := d.node, d.proc
	d.mu.Unlock()
	if p != nil {
		return p.alive()
	}
	return n != nil
}

// Paused reports whether the device is frozen.
func (d *Device) Paused() bool {
	d.mu.Lock()
	g, p := d.gate, d.proc
	d.mu.Unlock()
	if p != nil {
		return p.isPaused()
	}
	return g != nil && g.paused()
}

// wasStarted reports whether the device ever ran.
func (d *Device) wasStarted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.started
}

// netBase is what both kinds of Net share: the slots, the timeline recorder, the
// signature book and the waits, written against State.
type netBase struct {
	kind     string
	ttl      time.Duration
	tick     time.Duration
	election time.Duration
	onEvent  func(Event)
	state    func(*Device) (node.State, bool)
	target   func(*Device) Submitter                                              // nil: not a load target now
	readLog  func(*Device, uint64, func(intentlog.RaftEntry) error) (bool, error) // false: cannot read now

	mu      sync.Mutex
	chain   string
	devices []*Device
	rec     *recorder // nil: no timeline (the bench measures without it)
	stopRec context.CancelFunc
	recDone chan struct{}
	sigs    *sigBook
}

func newBase(kind string, ttl, tick, election time.Duration, onEvent func(Event)) *netBase {
	return &netBase{kind: kind, ttl: ttl, tick: tick, election: election, onEvent: onEvent, sigs: newSigBook()}
}

func (b *netBase) Kind() string            { return b.kind }
func (b *netBase) TTL() time.Duration      { return b.ttl }
func (b *netBase) Tick() time.Duration     { return b.tick }
func (b *netBase) Election() time.Duration { return b.election }

func (b *netBase) Chain() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.chain
}

func (b *netBase) setChain(did string) {
	b.mu.Lock()
	b.chain = did
	b.mu.Unlock()
}

// Devices returns every slot, in order.
func (b *netBase) Devices() []*Device {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*Device(nil), b.devices...)
}

// Device returns slot i.
func (b *netBase) Device(i int) (*Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.devices) {
		return nil, fmt.Errorf("%w: device %d", ErrNoDevice, i)
	}
	return b.devices[i], nil
}

func (b *netBase) addSlot(dir string, clock *Clock) *Device {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := len(b.devices)
	name := "d" + strconv.Itoa(i)
	d := &Device{Name: name, Index: i, Dir: filepath.Join(dir, name), Clock: clock}
	b.devices = append(b.devices, d)
	return d
}

// State is the backend's view of d.
func (b *netBase) State(d *Device) (node.State, bool) { return b.state(d) }

// Event records a timeline event and reports it through OnEvent.
func (b *netBase) Event(d *Device, kind, label string) {
	e := Event{At: time.Now(), Kind: kind, Label: label}
	if d != nil {
		e.Device = d.Name
	}
	if b.rec != nil {
		b.rec.event(e)
	}
	if b.onEvent != nil {
		b.onEvent(e)
	}
}

// startRecorder starts sampling every every (no recorder when every < 0).
func (b *netBase) startRecorder(every time.Duration, onHold func(string, uint64)) {
	if every < 0 {
		return
	}
	b.rec = newRecorder(every, func() []sampled {
		var out []sampled
		for _, d := range b.Devices() {
			s := sampled{name: d.Name}
			if st, ok := b.state(d); ok {
				s.st = &st
			}
			out = append(out, s)
		}
		return out
	})
	b.rec.onHold = onHold
	b.recDone = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	b.stopRec = cancel
	go func() {
		defer close(b.recDone)
		b.rec.run(ctx)
	}()
}

func (b *netBase) stopRecorder() {
	if b.stopRec != nil {
		b.stopRec()
		<-b.recDone
		b.stopRec = nil
	}
}

// Holder returns the device that holds the lease and may sign now (by its own
// replica and clock), with the epoch; paused and down devices are not asked.
func (b *netBase) Holder() (*Device, uint64, bool) {
	for _, d := range b.Devices() {
		if st, ok := b.state(d); ok && st.Lease.HeldByMe {
			return d, st.Lease.Epoch, true
		}
	}
	return nil, 0, false
}

// WaitHolder waits until some device holds the lease at an epoch above minEpoch
// and is not one of the excluded devices.
func (b *netBase) WaitHolder(ctx context.Context, minEpoch uint64, exclude ...*Device) (*Device, uint64, error) {
	var h *Device
	var ep uint64
	err := wait.Until(ctx, fmt.Sprintf("a lease holder above epoch %d", minEpoch), func() bool {
		d, e, ok := b.Holder()
		if ok && e > minEpoch && !contains(exclude, d) {
			h, ep = d, e
			return true
		}
		return false
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return h, ep, nil
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
func (b *netBase) WaitConverged(ctx context.Context, minSeq uint64) error {
	err := wait.UntilWhy(ctx, "convergence", func() (bool, string) { return b.converged(minSeq) })
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return nil
}

func (b *netBase) converged(minSeq uint64) (bool, string) {
	var head string
	var seq uint64
	n := 0
	for _, d := range b.Devices() {
		if !d.Running() || d.Paused() {
			continue
		}
		st, ok := b.state(d)
		if !ok {
			return false, d.Label() + " does not answer"
		}
		n++
		if st.Pending > 0 {
			return false, fmt.Sprintf("%s has %d pending", d.Label(), st.Pending)
		}
		if st.Loop.Queued > 0 || st.Loop.InFlight > 0 {
			return false, fmt.Sprintf("%s has %d submissions queued and %d commits in flight", d.Label(), st.Loop.Queued, st.Loop.InFlight)
		}
		if head == "" {
			head, seq = st.Head.Hash, st.Head.Seq
		} else if st.Head.Hash != head {
			return false, fmt.Sprintf("%s at seq %d, others at %d", d.Label(), st.Head.Seq, seq)
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

// MaxSeq is the highest head any running device reports.
func (b *netBase) MaxSeq() uint64 {
	var m uint64
	for _, d := range b.Devices() {
		if st, ok := b.state(d); ok && st.Head.Seq > m {
			m = st.Head.Seq
		}
	}
	return m
}

// WaitSeq waits until d has applied at least seq.
func (b *netBase) WaitSeq(ctx context.Context, d *Device, seq uint64) error {
	err := wait.Until(ctx, fmt.Sprintf("%s to reach seq %d", d.Label(), seq), func() bool {
		st, ok := b.state(d)
		return ok && st.Head.Seq >= seq
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return nil
}

// LoadTargets returns a Targets func over the running, unpaused devices.
func (b *netBase) LoadTargets() func() []Target {
	return func() []Target {
		var out []Target
		for _, d := range b.Devices() {
			if d.Paused() || !d.Running() {
				continue
			}
			if s := b.target(d); s != nil {
				out = append(out, Target{Device: d.Name, Submitter: s})
			}
		}
		return out
	}
}

// DeviceTarget returns a Targets func over d alone (while it runs).
func (b *netBase) DeviceTarget(d *Device) func() []Target {
	return func() []Target {
		if d.Paused() || !d.Running() {
			return nil
		}
		if s := b.target(d); s != nil {
			return []Target{{Device: d.Name, Submitter: s}}
		}
		return nil
	}
}

// Harvest reads every Raft log it can read now into the signature book.
func (b *netBase) Harvest() {
	for _, d := range b.Devices() {
		b.harvest(d)
	}
}

// harvest reads d's Raft log from where it read last (if the backend can read it
// now) and books every signed commit it holds.
func (b *netBase) harvest(d *Device) {
	if !d.wasStarted() {
		return
	}
	d.mu.Lock()
	from := max(d.raftNext, 1)
	d.mu.Unlock()
	next := from
	ok, err := b.readLog(d, from, func(e intentlog.RaftEntry) error {
		b.sigs.add(d.Name, e, b.Chain())
		next = e.Index + 1
		return nil
	})
	if !ok {
		return
	}
	if err != nil {
		b.sigs.readError(d.Name, err)
	}
	d.mu.Lock()
	if next > d.raftNext {
		d.raftNext = next
	}
	d.mu.Unlock()
}

// wiped resets d's harvest position (its Raft log starts over).
func (d *Device) wiped() {
	d.mu.Lock()
	d.raftNext = 0
	d.mu.Unlock()
}

// Timeline fills r's devices, events, holds, leaders, growth and down spans.
func (b *netBase) Timeline(r *Report) {
	for _, d := range b.Devices() {
		r.Devices = append(r.Devices, DeviceInfo{Name: d.Name, ID: d.ID(), Label: d.Label()})
	}
	if b.rec != nil {
		b.rec.fill(r)
	}
}

// FirstCommit is when the timeline first saw a commit of epoch applied.
func (b *netBase) FirstCommit(epoch uint64) (time.Time, bool) {
	if b.rec == nil {
		return time.Time{}, false
	}
	return b.rec.firstCommit(epoch)
}

// observed returns the recorder's first-seen times per seq (nil without one).
func (b *netBase) observed() map[uint64]time.Time {
	if b.rec == nil {
		return nil
	}
	return b.rec.observed()
}

// follow records when each commit is applied on an in-process node.
func (b *netBase) follow(ctx context.Context, n *node.Node) {
	if b.rec != nil {
		b.rec.follow(ctx, n)
	}
}

// wipeState removes a device's replicated state (Raft log and stable store, applied
// state, snapshots, address book) and keeps its keys: what an operator clears to
// re-add a device that left.
func wipeState(dir string) error {
	// snapshots/ is raft's FileSnapshotStore directory inside the data dir.
	// removed.json too: a device that left refuses to run or join again from the
	// same data dir; the slot re-joins as a new data dir would, with its keys.
	for _, f := range []string{intentlog.RaftFile, intentlog.StateFile, intentlog.StateFile + ".unclean", intentlog.CleanFile,
		"snapshots", transport.AddrBookFile, api.SocketFile, device.RemovedFile} {
		if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("wipe %s: %w", dir, err)
		}
	}
	return nil
}
