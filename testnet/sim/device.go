package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/devclock"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/node"
)

// device is one simulated machine: its data directory, its clock and its share of
// the chain key survive crashes; each start is a new incarnation of the real node
// (node.New over the simulated network).
type device struct {
	w     *world
	idx   int
	id    string
	dir   string // the node's data directory
	flush string // the copy of state.db the page cache last wrote out (a power cut rolls back to it)
	clock *devclock.Clock
	key   *recordingKey
	// op serialises start, crash, pause and resume. It is a channel, not a mutex:
	// inside a synctest bubble a goroutine waiting on a channel is durably blocked
	// (virtual time can advance), one waiting on a sync.Mutex is not.
	op chan struct{}

	mu        sync.Mutex
	n         *node.Node // nil while down
	ep        *endpoint
	inc       int
	pauseCh   chan struct{} // while paused: closed at resume (or crash)
	pauseMono bool
	suspended bool // has been suspended in this run (its clock steps go forward only)
	stepBack  bool // its wall clock has stepped back (its pauses are SIGSTOPs)
	removed   bool
	diskBad   bool // a disk fault left its raft.db refused, until repaired (faults_disk.go)
	joins     bool // repaired: it joins the cluster (never bootstraps one) from now on
	// servers is the configuration its next start bootstraps (node.Parts.Servers;
	// nil: every device). A founder that bootstraps alone names only itself, once
	// (faults_timetravel.go): node.New counts the others in it as the members it
	// knows, so every later start names them all.
	servers []raft.Server
	// cloneFrom: this is a clone of device idx (faults_clone.go), which these devices
	// reach instead of the original.
	cloneFrom []int
}

func newDevice(w *world, i int) *device {
	d := &device{w: w, idx: i, id: w.ids[i], dir: filepath.Join(w.dir, fmt.Sprintf("dev%d", i)),
		flush: filepath.Join(w.dir, fmt.Sprintf("dev%d.flushed", i)), clock: devclock.New(), op: make(chan struct{}, 1)}
	d.key = &recordingKey{key: w.key, dev: i, sigs: w.sigs}
	return d
}

func (d *device) lock()   { d.op <- struct{}{} }
func (d *device) unlock() { <-d.op }

// node returns the running incarnation (nil while down) and its number.
func (d *device) node() (*node.Node, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n, d.inc
}

func (d *device) paused() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pauseCh != nil
}

func (d *device) isRemoved() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removed
}

// start starts a new incarnation on the data directory (a no-op when up).
func (d *device) start() error {
	d.lock()
	defer d.unlock()
	if n, _ := d.node(); n != nil {
		return nil
	}
	w := d.w
	ep := &endpoint{dev: d.idx, addr: raft.ServerAddress(d.id), dead: make(chan struct{}), raftIn: make(chan raft.RPC, 16)}
	if d.cloneFrom != nil {
		w.nw.attachClone(ep, d.cloneFrom)
	} else {
		w.nw.attach(ep)
	}
	d.mu.Lock()
	inc, joins, servers := d.inc+1, d.joins, d.servers
	d.mu.Unlock()
	if servers == nil {
		servers = w.servers()
	}
	logger := w.cfg.Logger
	var raftLevel slog.Leveler // the node's default without --log
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	} else {
		raftLevel = slog.LevelDebug // --log: Raft's own messages too
	}
	cfg := node.Config{
		DataDir:      d.dir,
		ChainKey:     d.key,
		Bootstrap:    !joins, // a no-op once Raft has state
		TTL:          w.cfg.TTL,
		Tick:         w.cfg.Tick,
		Clock:        d.clock,
		Retention:    w.prof.Retention,
		Logger:       logger.With("dev", d.idx),
		Raft:         w.raftConfig,
		RaftLogLevel: raftLevel,
		Knobs: &knobs.Node{BeforePropose: func(ctx context.Context, e any) context.Context {
			d.beforePropose(inc, e)
			return ctx
		}},
	}
	applyKnobs(w.cfg.Knobs, &cfg)
	trans := &raftTransport{nw: w.nw, ep: ep, index: w.index, timeout: w.cfg.TTL / 2}
	n, err := node.New(cfg, node.Parts{ID: d.id, Raft: trans, Servers: servers,
		Net: func(r *raft.Raft, h node.Handlers) (node.Network, error) {
			return newForwarder(w.nw, ep, d.idx, w.ids, r, h, func(leader string) {
				if leader == d.id {
					w.ev.add(d.idx, "leader", "raft leader")
				}
			}), nil
		}})
	if err != nil {
		w.nw.kill(ep)
		return fmt.Errorf("dev%d: start: %w", d.idx, err)
	}
	d.mu.Lock()
	d.n, d.ep, d.inc = n, ep, inc
	d.mu.Unlock()
	w.ev.add(d.idx, "start", "incarnation %d", inc)
	w.monWG.Add(1)
	go w.chk.watch(d, inc, n, ep)
	return nil
}

// beforePropose is the node's BeforePropose knob: a paused device's proposals wait
// for the resume (a stopped process sends nothing); lease entries and commits are
// noted in the event log.
func (d *device) beforePropose(inc int, e any) {
	d.mu.Lock()
	p := d.pauseCh
	if d.inc != inc {
		p = nil // a proposal of an earlier incarnation, on its way out
	}
	d.mu.Unlock()
	if p != nil {
		<-p
	}
	ev := d.w.ev
	switch e := e.(type) {
	case intentlog.ClaimEntry:
		kind := "claim"
		if e.Force {
			kind = "steal"
		}
		ev.add(d.idx, "propose", "%s epoch=%d ts=%d", kind, e.Epoch, e.TS)
		d.w.chk.leaseProposed(recKey{e.Holder, e.Epoch, e.TS})
	case intentlog.RenewEntry:
		ev.add(d.idx, "propose", "renew epoch=%d ts=%d", e.Epoch, e.TS)
		d.w.chk.leaseProposed(recKey{e.Holder, e.Epoch, e.TS})
	case intentlog.ReleaseEntry:
		ev.add(d.idx, "propose", "release epoch=%d", e.Epoch)
	case intentlog.TransferEntry:
		ev.add(d.idx, "propose", "transfer epoch=%d to=dev%d", e.Epoch, d.w.devOf(e.To))
		d.w.chk.leaseProposed(recKey{e.To, e.Epoch + 1, e.TS})
	case intentlog.CommitEntry:
		if c, err := signer.DecodeCommit(e.Raw); err == nil {
			ev.add(d.idx, "propose", "commit seq=%d epoch=%d ops=%d", c.Seq, c.Epoch, len(c.Ops))
		}
		if d.w.cfg.atproto() {
			d.w.sigs.proposed(d.idx, e.Raw) // format.go
		}
	}
}

// crash kills the running incarnation the way kill -9 (power: a power cut) would and
// reports whether it was up. Raft's store (fsynced on every append) survives; the
// clean marker of state.db never got written; on a power cut state.db itself is
// what the page cache had written out (damage: "rollback" to the last flushed copy,
// "truncate" to frac of its size, "delete", or "keep").
func (d *device) crash(power bool, damage string, frac float64) bool {
	d.lock()
	defer d.unlock()
	d.mu.Lock()
	n, ep, p := d.n, d.ep, d.pauseCh
	d.n, d.ep, d.pauseCh = nil, nil, nil
	d.mu.Unlock()
	if n == nil {
		return false
	}
	d.w.nw.kill(ep) // the cable goes first: nothing more in or out
	if p != nil {
		close(p)
		d.clock.Resume(true) // the machine's clock kept time
	}
	_ = n.Kill()
	// Kill closed the files cleanly (and wrote the clean marker); undo what a crash
	// would not have done.
	_ = os.Remove(filepath.Join(d.dir, intentlog.CleanFile))
	if power {
		state := filepath.Join(d.dir, intentlog.StateFile)
		switch damage {
		case "rollback":
			if err := copyFile(d.flush, state); err != nil {
				_ = os.Remove(state)
			}
		case "truncate":
			if st, err := os.Stat(state); err == nil {
				_ = os.Truncate(state, int64(frac*float64(st.Size())))
			}
		case "delete":
			_ = os.Remove(state)
		}
	}
	return true
}

// stop ends the device at the end of the run (as a crash: nothing is checked after).
func (d *device) stop() {
	d.lock()
	defer d.unlock()
	d.mu.Lock()
	n, ep, p := d.n, d.ep, d.pauseCh
	d.n, d.ep, d.pauseCh = nil, nil, nil
	d.mu.Unlock()
	if n == nil {
		return
	}
	d.w.nw.kill(ep)
	if p != nil {
		close(p)
	}
	_ = n.Kill()
}

// pause stops the device like SIGSTOP (mono: its monotonic clock catches up on
// resume) or a suspend (it does not): its endpoints freeze, its clock stops, its
// proposals wait. It reports whether it paused the device.
func (d *device) pause(mono bool) (bool, bool) {
	d.lock()
	defer d.unlock()
	d.mu.Lock()
	if d.n == nil || d.pauseCh != nil {
		d.mu.Unlock()
		return false, mono
	}
	if d.stepBack {
		// A suspend after a backward step would leave both clocks behind the time
		// that passed: the documented limit of the lease (election, "Limits"), not a
		// finding. Stop the process instead.
		mono = true
	}
	if !mono {
		d.suspended = true
	}
	ep := d.ep
	d.pauseCh, d.pauseMono = make(chan struct{}), mono
	d.mu.Unlock()
	d.w.chk.setPaused(d.idx, true)
	d.w.nw.pause(ep)
	d.clock.Pause()
	return true, mono
}

// resume ends a pause: the clock first (so the lease sees the time that passed),
// then the network (what arrived meanwhile is delivered), then the proposals.
func (d *device) resume() {
	d.lock()
	defer d.unlock()
	d.mu.Lock()
	p, ep, mono := d.pauseCh, d.ep, d.pauseMono
	d.pauseCh = nil
	d.mu.Unlock()
	if p == nil {
		return
	}
	d.clock.Resume(mono)
	d.w.nw.resume(ep)
	close(p)
	d.w.chk.setPaused(d.idx, false)
}

// step steps the wall clock; a device that was suspended in this run only steps
// forward (see pause).
func (d *device) step(by time.Duration) time.Duration {
	d.mu.Lock()
	if by < 0 && d.suspended {
		by = -by
	}
	if by < 0 {
		d.stepBack = true
	}
	d.mu.Unlock()
	d.clock.Step(by)
	return by
}

// flushState copies state.db as the page cache would have written it out by now (a
// copy taken while the node writes may be torn, as a real flush can be).
func (d *device) flushState() {
	d.lock()
	defer d.unlock()
	if n, _ := d.node(); n == nil {
		return
	}
	_ = copyFile(filepath.Join(d.dir, intentlog.StateFile), d.flush)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func (w *world) devOf(id string) int {
	for i, s := range w.ids {
		if s == id {
			return i
		}
	}
	return -1
}
