package testnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/wait"
)

// gate freezes a device's proposals while it is paused (Knobs.BeforePropose waits
// on it), including one already in flight inside the signer.
type gate struct {
	mu     sync.Mutex
	ch     chan struct{} // nil: open; else closed at resume
	parked int           // signer proposals (lease or commit) that waited since the last pause
}

func newGate() *gate { return &gate{} }

func (g *gate) pause() {
	g.mu.Lock()
	if g.ch == nil {
		g.ch = make(chan struct{})
		g.parked = 0
	}
	g.mu.Unlock()
}

// parkedCount returns how many proposals waited at the gate since the last pause.
func (g *gate) parkedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.parked
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}

func (g *gate) paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch != nil
}

// wait blocks while the gate is closed: a paused device stands still, its own
// deadlines with it. Every proposal waits; only the signer's own (lease and commit
// entries, which the apply must fence after the lease moves on) count as caught in
// flight: a client's intents entry released at resume is rightly accepted.
//
// It returns the context the proposal goes on with: a deadline that passed while the
// device stood still moves by the time it stood still, so the proposal goes out at
// resume as a frozen process's would (with ctx's own deadline it failed before it was
// sent, the apply saw nothing to refuse, and TestDrillPauseHolder failed in CI). A
// cancelled ctx (a stopping node) ends the wait; Kill and Stop also open the gate.
func (g *gate) wait(ctx context.Context, e intentlog.Entry) context.Context {
	g.mu.Lock()
	ch := g.ch
	if _, intents := e.(intentlog.IntentsEntry); ch != nil && !intents {
		g.parked++
	}
	g.mu.Unlock()
	if ch == nil {
		return ctx
	}
	parked := time.Now()
	select {
	case <-ch:
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ctx
		}
		<-ch
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx
	}
	moved, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(time.Since(parked)))
	// ctx cancelled (not timed out) later still cancels the moved one.
	context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	return moved
}

// Kill stops device d hard: no release, no goodbye (a crash). Its data dir stays.
func (c *Cluster) Kill(d *Device) error {
	n := c.detach(d)
	if n == nil {
		return fmt.Errorf("kill %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventKill, "kill "+d.Label())
	// A killed paused device must not keep goroutines parked, and comes back with a
	// running clock.
	d.gate.resume()
	d.Clock.Resume(false)
	if err := n.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", d.Label(), err)
	}
	return nil
}

// Stop stops device d gracefully (releasing the lease if it holds it).
func (c *Cluster) Stop(ctx context.Context, d *Device) error {
	n := c.detach(d)
	if n == nil {
		return fmt.Errorf("stop %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventStop, "stop "+d.Label())
	d.gate.resume()
	d.Clock.Resume(false)
	if err := n.Stop(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", d.Label(), err)
	}
	return nil
}

// Restart starts a stopped or killed device again from its data dir (same identity,
// same port when it is still free).
func (c *Cluster) Restart(ctx context.Context, d *Device) error {
	if d.Running() {
		return fmt.Errorf("restart %s: already running", d.Label())
	}
	if d.Left() {
		return fmt.Errorf("restart %s: %w: it left the cluster (Rejoin)", d.Label(), ErrNoDevice)
	}
	c.harvest(d) // while it is down, its Raft log is on disk
	if err := c.startDevice(ctx, d, false); err != nil {
		return err
	}
	c.Event(d, EventRestart, "restart "+d.Label())
	return nil
}

// Pause freezes device d mid-flight: first its proposals start parking in
// Knobs.BeforePropose, and Pause waits (up to TTL/2) until one is caught there, so
// that a proposal is in flight while the device is frozen; then its network is cut
// both ways (Host.Block on it and on every peer) and its clock stops. Resume undoes
// all three; the parked proposals then go out, and the apply's fencing must refuse
// them if the lease moved on.
func (c *Cluster) Pause(d *Device) error {
	if !d.Running() {
		return fmt.Errorf("pause %s: %w", d.Name, ErrNoDevice)
	}
	d.gate.pause()
	// No event says a proposal reached the gate in time: poll, bounded.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.TTL/2)
	_ = wait.Until(ctx, "a proposal parked at the gate", func() bool { return d.gate.parkedCount() > 0 })
	cancel()
	label := "pause " + d.Label()
	if k := d.gate.parkedCount(); k > 0 {
		label += fmt.Sprintf(" (%d proposal(s) caught in flight)", k)
	}
	c.Event(d, EventPause, label)
	d.Clock.Pause()
	c.applyBlocks()
	return nil
}

// Resume unfreezes a paused device.
func (c *Cluster) Resume(d *Device) error {
	label := "resume " + d.Label()
	if k := d.gate.parkedCount(); k > 0 {
		label += fmt.Sprintf(" (%d parked proposal(s) go out)", k)
	}
	c.Event(d, EventResume, label)
	d.Clock.Resume(false)
	d.gate.resume()
	c.applyBlocks()
	return nil
}

// Partition cuts the network between the given groups of devices (Host.Block both
// ways between every pair in different groups). Devices in no group keep their
// links. It replaces any previous cut.
func (c *Cluster) Partition(groups ...[]*Device) {
	var pairs [][2]*Device
	var names []string
	for gi, g := range groups {
		var gn []string
		for _, a := range g {
			gn = append(gn, a.Name)
			for gj, h := range groups {
				if gj > gi {
					for _, b := range h {
						pairs = append(pairs, [2]*Device{a, b})
					}
				}
			}
		}
		names = append(names, "["+strings.Join(gn, " ")+"]")
	}
	c.cut(pairs, EventPartition, "partition "+strings.Join(names, " | "))
}

// Cut cuts the links between the given pairs only (a partial partition: the others
// keep theirs). It replaces any previous cut.
func (c *Cluster) Cut(pairs ...[2]*Device) {
	var names []string
	for _, p := range pairs {
		names = append(names, p[0].Name+"✕"+p[1].Name)
	}
	c.cut(pairs, EventPartition, "cut "+strings.Join(names, " "))
}

func (c *Cluster) cut(pairs [][2]*Device, kind, label string) {
	c.mu.Lock()
	c.blocks = map[[2]int]bool{}
	for _, p := range pairs {
		c.blocks[pairOf(p[0].Index, p[1].Index)] = true
	}
	c.mu.Unlock()
	c.Event(nil, kind, label)
	c.applyBlocks()
}

// Heal removes the partition (paused devices stay cut off until resumed).
func (c *Cluster) Heal() {
	c.mu.Lock()
	c.blocks = map[[2]int]bool{}
	c.mu.Unlock()
	c.Event(nil, EventHeal, "heal")
	c.applyBlocks()
}

func (c *Cluster) partitioned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.blocks) > 0
}

func pairOf(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

// applyBlocks makes every running host's block list match the cut pairs plus the
// paused devices.
func (c *Cluster) applyBlocks() {
	devs := c.Devices()
	c.mu.Lock()
	cut := func(a, b *Device) bool {
		return c.blocks[pairOf(a.Index, b.Index)] || a.gate.paused() || b.gate.paused()
	}
	type plan struct {
		d     *Device
		block []peer.ID
		open  []peer.ID
	}
	var plans []plan
	for _, a := range devs {
		p := plan{d: a}
		for _, b := range devs {
			if a == b || b.ID() == "" {
				continue
			}
			id, err := peer.Decode(b.ID())
			if err != nil {
				continue
			}
			if cut(a, b) {
				p.block = append(p.block, id)
			} else {
				p.open = append(p.open, id)
			}
		}
		plans = append(plans, p)
	}
	c.mu.Unlock()
	for _, p := range plans {
		n := p.d.Node()
		if n == nil {
			continue
		}
		if len(p.open) > 0 {
			n.Host().Unblock(p.open...)
		}
		if len(p.block) > 0 {
			n.Host().Block(p.block...)
		}
	}
}

// Skew sets device d's wall clock offset (its monotonic clock is unaffected).
func (c *Cluster) Skew(d *Device, offset time.Duration) {
	c.Event(d, EventSkew, fmt.Sprintf("skew %s %+v", d.Label(), offset))
	d.Clock.SetOffset(offset)
}

// Drift sets device d's clock rate (1 = in step).
func (c *Cluster) Drift(d *Device, rate float64) {
	c.Event(d, EventDrift, fmt.Sprintf("drift %s x%.2f", d.Label(), rate))
	d.Clock.SetRate(rate)
}

// Leave makes device d leave the cluster (Node.Leave: it hands off the lease and is
// removed from the Raft configuration) and stops it.
func (c *Cluster) Leave(ctx context.Context, d *Device) error {
	n := d.Node()
	if n == nil {
		return fmt.Errorf("leave %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventLeave, "leave "+d.Label())
	if err := n.Leave(ctx); err != nil {
		return fmt.Errorf("leave %s: %w", d.Label(), err)
	}
	c.detach(d)
	d.mu.Lock()
	d.left = true
	d.mu.Unlock()
	if err := n.Stop(ctx); err != nil {
		return fmt.Errorf("stop %s after leave: %w", d.Label(), err)
	}
	return nil
}

// Rejoin brings a slot that left back: its Raft log is read, its replicated state
// wiped (identity kept), and it joins through a fresh join window.
func (c *Cluster) Rejoin(ctx context.Context, d *Device) error {
	if d.Running() {
		return fmt.Errorf("rejoin %s: still running", d.Label())
	}
	c.harvest(d)
	if err := wipeState(d.Dir); err != nil {
		return err
	}
	d.wiped()
	if err := c.startDevice(ctx, d, false); err != nil {
		return err
	}
	d.mu.Lock()
	d.left = false
	d.mu.Unlock()
	c.Event(d, EventJoin, "join "+d.Label())
	return nil
}

// Release makes device d release the lease it holds (graceful handover).
func (c *Cluster) Release(ctx context.Context, d *Device) error {
	n := d.Node()
	if n == nil {
		return fmt.Errorf("release %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventRelease, "release "+d.Label())
	if err := n.Release(ctx); err != nil {
		return fmt.Errorf("release %s: %w", d.Label(), err)
	}
	return nil
}

// Transfer makes device d hand the lease to device to.
func (c *Cluster) Transfer(ctx context.Context, d, to *Device) error {
	n := d.Node()
	if n == nil {
		return fmt.Errorf("transfer %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventTransfer, "transfer "+d.Label()+" → "+to.Label())
	if err := n.Transfer(ctx, to.ID()); err != nil {
		return fmt.Errorf("transfer %s to %s: %w", d.Label(), to.Label(), err)
	}
	return nil
}
