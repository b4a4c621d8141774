package testnet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/intentlog"
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

// wait blocks while the gate is closed (or until ctx is done: a stopping node). Every
// proposal waits; only the signer's own (lease and commit entries, which the apply must
// fence after the lease moves on) count as caught in flight: a client's intents entry
// released at resume is rightly accepted.
func (g *gate) wait(ctx context.Context, e intentlog.Entry) {
	g.mu.Lock()
	ch := g.ch
	if _, intents := e.(intentlog.IntentsEntry); ch != nil && !intents {
		g.parked++
	}
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// Kill stops device d hard: no release, no goodbye (a crash). Its data dir stays.
func (c *Cluster) Kill(d *Device) error {
	n := d.detach()
	if n == nil {
		return fmt.Errorf("kill %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventKill, "kill "+d.Name)
	// A killed paused device must not keep goroutines parked, and comes back with a
	// running clock.
	d.gate.resume()
	d.Clock.Resume()
	if err := n.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", d.Name, err)
	}
	return nil
}

// StopDevice stops device d gracefully (releasing the lease if it holds it).
func (c *Cluster) StopDevice(ctx context.Context, d *Device) error {
	n := d.detach()
	if n == nil {
		return fmt.Errorf("stop %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventStop, "stop "+d.Name)
	d.gate.resume()
	d.Clock.Resume()
	if err := n.Stop(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", d.Name, err)
	}
	return nil
}

// Restart starts a stopped or killed device again from its data dir (same identity,
// same port when it is still free).
func (c *Cluster) Restart(ctx context.Context, d *Device) error {
	if d.Running() {
		return fmt.Errorf("restart %s: already running", d.Name)
	}
	d.mu.Lock()
	left := d.left
	d.mu.Unlock()
	if left {
		return fmt.Errorf("restart %s: %w: it left the cluster", d.Name, ErrNoDevice)
	}
	if err := c.startDevice(ctx, d, false); err != nil {
		return err
	}
	c.Event(d, EventRestart, "restart "+d.Name)
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
	deadline := time.Now().Add(c.cfg.TTL / 2)
	tk := time.NewTicker(2 * time.Millisecond)
	for d.gate.parkedCount() == 0 && time.Now().Before(deadline) {
		<-tk.C
	}
	tk.Stop()
	label := "pause " + d.Name
	if k := d.gate.parkedCount(); k > 0 {
		label += fmt.Sprintf(" (%d proposal(s) caught in flight)", k)
	}
	c.Event(d, EventPause, label)
	d.Clock.Pause()
	c.applyBlocks()
	return nil
}

// Resume unfreezes a paused device.
func (c *Cluster) Resume(d *Device) {
	label := "resume " + d.Name
	if k := d.gate.parkedCount(); k > 0 {
		label += fmt.Sprintf(" (%d parked proposal(s) go out)", k)
	}
	c.Event(d, EventResume, label)
	d.Clock.Resume()
	d.gate.resume()
	c.applyBlocks()
}

// Partition cuts the network between the given groups of devices (Host.Block both
// ways between every pair in different groups). Devices in no group keep their
// links. It replaces any previous partition.
func (c *Cluster) Partition(groups ...[]*Device) {
	c.mu.Lock()
	c.blocks = map[[2]int]bool{}
	var names []string
	for gi, g := range groups {
		var gn []string
		for _, a := range g {
			gn = append(gn, a.Name)
			for gj, h := range groups {
				if gj == gi {
					continue
				}
				for _, b := range h {
					c.blocks[pairOf(a.Index, b.Index)] = true
				}
			}
		}
		names = append(names, fmt.Sprint(gn))
	}
	c.mu.Unlock()
	c.Event(nil, EventPartition, "partition "+fmt.Sprint(names))
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

// applyBlocks makes every running host's block list match the partition plus the
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
	c.Event(d, EventSkew, fmt.Sprintf("skew %s %+v", d.Name, offset))
	d.Clock.SetOffset(offset)
}

// Drift sets device d's clock rate (1 = in step).
func (c *Cluster) Drift(d *Device, rate float64) {
	c.Event(d, EventDrift, fmt.Sprintf("drift %s x%.2f", d.Name, rate))
	d.Clock.SetRate(rate)
}

// AddDevice adds a new device that joins the running cluster (during load, if any).
func (c *Cluster) AddDevice(ctx context.Context) (*Device, error) {
	d := c.newDevice()
	if err := c.startDevice(ctx, d, false); err != nil {
		return d, err
	}
	c.Event(d, EventJoin, "join "+d.Name)
	return d, nil
}

// RemoveDevice makes device d leave the cluster (Node.Leave: it hands off the lease
// and is removed from the Raft configuration) and stops it for good.
func (c *Cluster) RemoveDevice(ctx context.Context, d *Device) error {
	n := d.Node()
	if n == nil {
		return fmt.Errorf("leave %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventLeave, "leave "+d.Name)
	if err := n.Leave(ctx); err != nil {
		return fmt.Errorf("leave %s: %w", d.Name, err)
	}
	d.detach()
	d.mu.Lock()
	d.left = true
	d.mu.Unlock()
	if err := n.Stop(ctx); err != nil {
		return fmt.Errorf("stop %s after leave: %w", d.Name, err)
	}
	return nil
}

// Release makes device d release the lease it holds (graceful handover).
func (c *Cluster) Release(ctx context.Context, d *Device) error {
	n := d.Node()
	if n == nil {
		return fmt.Errorf("release %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventRelease, "release "+d.Name)
	if err := n.Release(ctx); err != nil {
		return fmt.Errorf("release %s: %w", d.Name, err)
	}
	return nil
}

// Transfer makes device d hand the lease to device to.
func (c *Cluster) Transfer(ctx context.Context, d, to *Device) error {
	n := d.Node()
	if n == nil {
		return fmt.Errorf("transfer %s: %w", d.Name, ErrNoDevice)
	}
	c.Event(d, EventRelease, "transfer "+d.Name+"→"+to.Name)
	if err := n.Transfer(ctx, to.ID()); err != nil {
		return fmt.Errorf("transfer %s to %s: %w", d.Name, to.Name, err)
	}
	return nil
}
