package testnet

// The faults and lease operations a drill applies to a process cluster: kill -9,
// SIGSTOP and SIGCONT, a graceful stop, a restart, leave and rejoin, release and
// transfer.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Kill sends SIGKILL (no release), waits for the process to exit and reads its Raft
// log.
func (pc *ProcCluster) Kill(d *Device) error {
	pc.Event(d, EventKill, "kill -9 "+d.Label())
	if err := d.proc.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", d.Label(), err)
	}
	if !d.proc.waitExit(10 * time.Second) {
		return fmt.Errorf("kill %s: still running 10 s after SIGKILL", d.Label())
	}
	d.proc.mu.Lock()
	d.proc.paused = false
	d.proc.mu.Unlock()
	pc.harvest(d)
	return nil
}

// Pause sends SIGSTOP.
func (pc *ProcCluster) Pause(d *Device) error {
	pc.Event(d, EventPause, "SIGSTOP "+d.Label())
	d.proc.mu.Lock()
	d.proc.paused = true
	d.proc.mu.Unlock()
	return d.proc.signal(syscall.SIGSTOP)
}

// Resume sends SIGCONT.
func (pc *ProcCluster) Resume(d *Device) error {
	pc.Event(d, EventResume, "SIGCONT "+d.Label())
	err := d.proc.signal(syscall.SIGCONT)
	d.proc.mu.Lock()
	d.proc.paused = false
	d.proc.mu.Unlock()
	return err
}

// Stop sends SIGTERM (graceful: the node releases) and waits, then SIGKILL; the
// stopped device's Raft log is read.
func (pc *ProcCluster) Stop(ctx context.Context, d *Device) error {
	pc.Event(d, EventStop, "SIGTERM "+d.Label())
	return pc.terminate(d)
}

func (pc *ProcCluster) terminate(d *Device) error {
	if !d.proc.alive() {
		return nil
	}
	err := d.proc.terminate(2*pc.cfg.TTL + 10*time.Second)
	if err != nil {
		err = fmt.Errorf("%s: %w", d.Label(), err)
	}
	pc.harvest(d)
	return err
}

// reapGrace bounds the wait for the exit channel of a process the OS has already
// reaped (its Wait returned; the goroutine closing the channel has not run yet).
const reapGrace = 5 * time.Second

// terminate stops the process: SIGCONT if paused, SIGTERM, SIGKILL after grace. A
// process that exited by itself meanwhile (a node stops after `baton leave`: the
// signal then finds it finished) is stopped, not an error.
func (p *proc) terminate(grace time.Duration) error {
	if p.isPaused() {
		_ = p.signal(syscall.SIGCONT)
		p.mu.Lock()
		p.paused = false
		p.mu.Unlock()
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) && p.waitExit(reapGrace) {
			return nil
		}
		return err
	}
	if !p.waitExit(grace) {
		// A goroutine dump into the device's log says where it hung (Go prints it on
		// SIGQUIT and exits), then SIGKILL.
		_ = p.signal(syscall.SIGQUIT)
		p.waitExit(2 * time.Second)
		_ = p.signal(syscall.SIGKILL)
		p.waitExit(reapGrace)
		return errors.New("did not stop on SIGTERM (a goroutine dump is in its log)")
	}
	return nil
}

// Restart runs the device again from its data dir.
func (pc *ProcCluster) Restart(ctx context.Context, d *Device) error {
	if d.Running() {
		return fmt.Errorf("restart %s: already running", d.Label())
	}
	if d.Left() {
		return fmt.Errorf("restart %s: %w: it left the cluster (Rejoin)", d.Label(), ErrNoDevice)
	}
	if err := pc.spawn(d, "run"); err != nil {
		return err
	}
	pc.Event(d, EventRestart, "restart "+d.Label())
	return nil
}

// Leave runs `baton leave` against d (it releases the lease if held and removes
// itself from the Raft configuration), then stops the process.
func (pc *ProcCluster) Leave(ctx context.Context, d *Device) error {
	if d.Index == 0 {
		// Its data dir was made with init --new-chain: wiped, it would bootstrap a
		// new cluster on the next run instead of joining.
		return fmt.Errorf("leave %s: the founding device does not leave in procs mode", d.Label())
	}
	pc.Event(d, EventLeave, "leave "+d.Label())
	d.proc.setStopping() // the node stops by itself once it left
	if _, err := pc.runCLI(ctx, "leave", "--data", d.Dir); err != nil {
		return fmt.Errorf("leave %s: %w", d.Label(), err)
	}
	d.mu.Lock()
	d.left = true
	d.mu.Unlock()
	return pc.terminate(d)
}

// Rejoin wipes the replicated state of a device that left (its keys stay) and runs
// `baton join` with a fresh invite from a running member, as an operator re-adds a
// device.
func (pc *ProcCluster) Rejoin(ctx context.Context, d *Device) error {
	if d.Running() {
		return fmt.Errorf("rejoin %s: still running", d.Label())
	}
	pc.harvest(d)
	if err := wipeState(d.Dir); err != nil {
		return err
	}
	d.wiped()
	members := 0
	for _, o := range pc.Devices() {
		if !o.Left() && o != d {
			members++
		}
	}
	if err := pc.join(ctx, d, members+1); err != nil {
		return err
	}
	d.mu.Lock()
	d.left = false
	d.mu.Unlock()
	pc.Event(d, EventJoin, "join "+d.Label())
	return nil
}

// Release asks d's API to release the lease.
func (pc *ProcCluster) Release(ctx context.Context, d *Device) error {
	c := d.proc.api()
	if c == nil {
		return fmt.Errorf("release %s: %w", d.Name, ErrNoDevice)
	}
	pc.Event(d, EventRelease, "release "+d.Label())
	if err := c.Release(ctx); err != nil {
		return fmt.Errorf("release %s: %w", d.Label(), err)
	}
	return nil
}

// Transfer asks d's API to hand the lease to to.
func (pc *ProcCluster) Transfer(ctx context.Context, d, to *Device) error {
	c := d.proc.api()
	if c == nil {
		return fmt.Errorf("transfer %s: %w", d.Name, ErrNoDevice)
	}
	pc.Event(d, EventTransfer, "transfer "+d.Label()+" → "+to.Label())
	if err := c.Transfer(ctx, to.ID()); err != nil {
		return fmt.Errorf("transfer %s to %s: %w", d.Label(), to.Label(), err)
	}
	return nil
}
