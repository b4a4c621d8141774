package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
)

// do runs one action of the schedule (in its own goroutine: a crash or a release may
// take virtual time, and the schedule keeps its own).
func (w *world) do(a action) {
	switch a.Kind {
	case aHeal:
		w.heal(a.Heal)
		return
	case aFlush:
		w.devs[a.Dev].flushState()
		return
	}
	dev := a.Dev
	switch a.Target {
	case Holder:
		dev = w.holderDev()
	case Leader:
		dev = w.leaderDev()
	}
	w.mu.Lock()
	healed := w.healed
	w.mu.Unlock()
	if healed {
		return
	}
	w.ev.add(dev, "fault", "#%d %s", a.ID, a)
	ok, detail := w.inject(a, dev)
	if !ok {
		w.mu.Lock()
		w.skipped++
		w.mu.Unlock()
		w.ev.add(dev, "skipped", "#%d (no target)", a.ID)
		return
	}
	w.mu.Lock()
	w.faults[a.Kind]++
	w.mu.Unlock()
	if detail != "" {
		w.ev.add(dev, "result", "#%d %s", a.ID, detail)
	}
}

// inject applies fault a to device dev (-1 if the fault needs none or none was
// found) and registers its undo under a.ID. It reports whether it did anything.
func (w *world) inject(a action, dev int) (bool, string) {
	rng := rngFor(a)
	if ok, detail, handled := w.injectHandover(a, rng); handled { // faults_handover.go
		return ok, detail
	}
	if needsDevice(a) && dev < 0 {
		return false, ""
	}
	switch a.Kind {
	case FDelay, FLoss, FDup, FReorder, FPartition, FOneWay, FSlowFwd:
		links := a.Links
		if a.DevLinks != 0 {
			links = nil
			for o := range w.cfg.Devices {
				if o == dev {
					continue
				}
				if a.DevLinks&linksOut != 0 {
					links = append(links, [2]int{dev, o})
				}
				if a.DevLinks&linksIn != 0 {
					links = append(links, [2]int{o, dev})
				}
			}
		}
		w.mu.Lock()
		w.linkFs[a.ID] = linkFault{links: links, f: a.Faults}
		w.active[a.ID] = func() {
			w.mu.Lock()
			delete(w.linkFs, a.ID)
			w.mu.Unlock()
			w.applyLinks()
		}
		w.mu.Unlock()
		w.applyLinks()
		if dev >= 0 {
			return true, fmt.Sprintf("%s (dev%d)", a, dev)
		}
		return true, ""

	case FLateRenew:
		return w.lateRenewal(a, dev)

	case FRepair, FLostDB, FRestore, FRepairBehind:
		return w.injectRepair(a, dev)

	case FRepairMajority:
		return w.injectRepairMajority(a, dev)

	case FBackup, FTimeTravel, FTimeTravelWhole:
		return w.injectTimeTravel(a, dev) // faults_timetravel.go

	case FClone:
		return w.injectClone(a, dev) // faults_clone.go

	case FCrash, FPowerCut:
		d := w.devs[dev]
		if !d.crash(a.Kind == FPowerCut, a.Damage, a.Frac) {
			return false, ""
		}
		w.setUndo(a.ID, func() { w.restart(d) })
		return true, fmt.Sprintf("%s (dev%d)", a, dev)

	case FDisk:
		return w.injectDisk(a, dev)

	case FPause:
		d := w.devs[dev]
		ok, mono := d.pause(a.Mono)
		if !ok {
			return false, ""
		}
		w.setUndo(a.ID, d.resume)
		mode := "suspend"
		if mono {
			mode = "sigstop"
		}
		return true, fmt.Sprintf("pause dev%d %s for %v", dev, mode, a.Dur.Round(time.Millisecond))

	case FClockStep, FClockJump:
		by := w.devs[dev].step(a.Step)
		w.mu.Lock()
		w.stepped = true
		w.mu.Unlock()
		return true, fmt.Sprintf("clockstep dev%d by %v", dev, by.Round(time.Millisecond))

	case FClockRate:
		d := w.devs[dev]
		d.clock.SetRate(a.Rate)
		w.setUndo(a.ID, func() { d.clock.SetRate(1) })
		return true, ""

	case FRelease:
		n, _ := w.devs[dev].node()
		if n == nil || !n.Holds() {
			return false, ""
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
		defer cancel()
		err := n.Release(ctx)
		return true, fmt.Sprintf("release by dev%d: %v", dev, errText(err))

	case FTransfer:
		n, _ := w.devs[dev].node()
		if n == nil || !n.Holds() {
			return false, ""
		}
		to := w.pickDev(rng, func(i int) bool { return i != dev && !w.devs[i].isRemoved() })
		if to < 0 {
			return false, ""
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
		defer cancel()
		err := n.Transfer(ctx, w.ids[to])
		return true, fmt.Sprintf("transfer dev%d -> dev%d: %v", dev, to, errText(err))

	case FSteal:
		holder := w.holderDev()
		by := w.pickDev(rng, func(i int) bool {
			n, _ := w.devs[i].node()
			return i != holder && n != nil && !w.devs[i].paused()
		})
		if by < 0 {
			return false, ""
		}
		n, _ := w.devs[by].node()
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
		defer cancel()
		err := n.Steal(ctx, fmt.Sprintf("sim: operator steal #%d", a.ID))
		return true, fmt.Sprintf("steal by dev%d (holder dev%d): %v", by, holder, errText(err))

	case FRemove:
		d := w.devs[dev]
		if d.isRemoved() || w.voters() < 3 {
			return false, ""
		}
		// Marked removed first: a change whose future fails (leadership lost) may
		// still commit, so the re-join checks the configuration itself. Its undo is
		// registered once the change is over (a re-join racing the removal would find
		// the device still a member); a heal due earlier finds none, and the final
		// heal re-joins every device marked removed.
		d.mu.Lock()
		d.removed = true
		d.mu.Unlock()
		err := w.membership(func(r *raft.Raft) raft.Future {
			return r.RemoveServer(raft.ServerID(d.id), 0, w.cfg.TTL)
		})
		w.setUndo(a.ID, func() { w.rejoin(d) })
		return true, fmt.Sprintf("remove dev%d: %s", dev, errText(err))

	case FLeadership:
		n, _ := w.devs[dev].node()
		if n == nil {
			return false, ""
		}
		err := n.Log().Raft().LeadershipTransfer().Error()
		return true, fmt.Sprintf("leadership transfer from dev%d: %v", dev, errText(err))

	case FBurst:
		n, _ := w.devs[a.Dev].node()
		if n == nil {
			return false, ""
		}
		w.burst(a, a.Dev)
		return true, ""
	}
	return false, ""
}

// lateRenewal sets up the race of bug (b): the holder's forwarded proposals arrive
// about half a TTL late (a renewal sent when it falls due lands about when the
// standbys' observation of the record it replaces reaches a TTL: around their read
// barrier), and the Raft leader, which sees every record first and would lapse
// first and claim locally, has its wall clock a quarter of a TTL behind (it waits
// for its wall clock to agree). A holder that leads Raft hands leadership over
// first, so that its renewals are forwarded at all.
func (w *world) lateRenewal(a action, h int) (bool, string) {
	if l := w.leaderDev(); l == h {
		if n, _ := w.devs[h].node(); n != nil {
			_ = n.Log().Raft().LeadershipTransfer().Error()
		}
	}
	l := w.leaderDev()
	if l < 0 || l == h {
		return false, ""
	}
	delay := a.Faults.FwdDelay
	w.mu.Lock()
	links := make([][2]int, 0, w.cfg.Devices-1)
	for o := range w.cfg.Devices {
		if o != h {
			links = append(links, [2]int{h, o})
		}
	}
	w.linkFs[a.ID] = linkFault{links: links, f: linkFaults{FwdDelay: delay, FwdSpread: 0.01}}
	w.mu.Unlock()
	w.applyLinks()
	back := w.devs[l].step(-w.cfg.TTL / 4)
	w.setUndo(a.ID, func() {
		w.mu.Lock()
		delete(w.linkFs, a.ID)
		w.mu.Unlock()
		w.applyLinks()
		w.devs[l].step(-back)
	})
	w.mu.Lock()
	w.stepped = true
	w.mu.Unlock()
	return true, fmt.Sprintf("late renewals of holder dev%d (forwards +%v), leader dev%d's wall clock %v", h,
		delay.Round(time.Millisecond), l, back)
}

// needsDevice reports whether fault a acts on one device (its Dev, or its Target
// resolved when it runs). Link faults given as a list of links need none; a steal
// picks its own device.
func needsDevice(a action) bool {
	switch a.Kind {
	case FDelay, FLoss, FDup, FReorder, FPartition, FOneWay, FSlowFwd:
		return a.DevLinks != 0
	case FSteal:
		return false
	}
	return true
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func (w *world) setUndo(id int, f func()) {
	w.mu.Lock()
	w.active[id] = f
	w.mu.Unlock()
}

// heal undoes fault id (if it is still active).
func (w *world) heal(id int) {
	w.mu.Lock()
	f := w.active[id]
	delete(w.active, id)
	w.mu.Unlock()
	if f != nil {
		f()
		w.ev.add(-1, "heal", "#%d", id)
	}
}

// applyLinks sets every link to the default combined with the active link faults.
func (w *world) applyLinks() {
	w.mu.Lock()
	ids := make([]int, 0, len(w.linkFs))
	for id := range w.linkFs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	n := w.cfg.Devices
	eff := make([][]linkFaults, n)
	for a := range n {
		eff[a] = make([]linkFaults, n)
		for b := range n {
			eff[a][b] = w.nw.def
		}
	}
	for _, id := range ids {
		lf := w.linkFs[id]
		for _, l := range lf.links {
			eff[l[0]][l[1]] = combine(eff[l[0]][l[1]], lf.f)
		}
	}
	w.mu.Unlock()
	for a := range n {
		for b := range n {
			if a != b {
				w.nw.setLink(a, b, eff[a][b])
			}
		}
	}
}

func combine(a, b linkFaults) linkFaults {
	return linkFaults{
		Delay:     max(a.Delay, b.Delay),
		Jitter:    max(a.Jitter, b.Jitter),
		Loss:      1 - (1-a.Loss)*(1-b.Loss),
		Dup:       max(a.Dup, b.Dup),
		Reorder:   a.Reorder || b.Reorder,
		Cut:       a.Cut || b.Cut,
		FwdDelay:  max(a.FwdDelay, b.FwdDelay),
		RaftDelay: max(a.RaftDelay, b.RaftDelay),
		RaftCut:   a.RaftCut || b.RaftCut,
		FwdSpread: func() float64 {
			if a.FwdDelay >= b.FwdDelay {
				return a.FwdSpread
			}
			return b.FwdSpread
		}(),
	}
}

// restart starts d again (a crashed device comes back on the same data dir).
func (w *world) restart(d *device) {
	if err := d.start(); err != nil {
		w.violation(VPanic, d.idx, "restart: %v", err)
	}
}

// rejoin adds a removed device back as a voter, if the leader's configuration lacks
// it, and starts its process again.
func (w *world) rejoin(d *device) {
	if !d.isRemoved() {
		return
	}
	var err error
	if !w.inConfiguration(d) {
		err = w.membership(func(r *raft.Raft) raft.Future {
			return r.AddVoter(raft.ServerID(d.id), raft.ServerAddress(d.id), 0, w.cfg.TTL)
		})
	}
	w.ev.add(d.idx, "rejoin", "%s", errText(err))
	if err == nil {
		d.mu.Lock()
		d.removed = false
		d.mu.Unlock()
	}
	// Raft shuts down a server removed from the configuration (ShutdownOnRemove, on
	// by default and in baton): the device's process must start again to take part.
	// Also when the change's future failed: it may still have committed (as a
	// removal may), and a voter left down by it counts against the quorum. Two such
	// (a removed device's re-add, then a removed leader's, each failing while the
	// leader stepped down) left 2 of 4 voters live: no leader for good, and no later
	// re-join could run without one (seed 908404: a fault of the simulator's
	// operator, not of baton).
	if n, _ := d.node(); n != nil && n.Log().Raft().State() == raft.Shutdown {
		d.crash(false, "", 0)
		_ = os.WriteFile(filepath.Join(d.dir, intentlog.CleanFile), nil, 0o600) // Kill closed it cleanly: keep the mark
		w.restart(d)
	}
}

// membership runs a configuration change on the Raft leader (node.New has no
// libp2p membership: the simulator drives raft.Raft directly), retrying while
// there is no leader, for up to a few TTLs.
func (w *world) membership(change func(*raft.Raft) raft.Future) error {
	deadline := time.Now().Add(3 * w.cfg.TTL)
	var err error
	for time.Now().Before(deadline) {
		l := w.leaderDev()
		if l < 0 {
			err = fmt.Errorf("no leader")
			time.Sleep(w.cfg.Tick)
			continue
		}
		n, _ := w.devs[l].node()
		if n == nil {
			time.Sleep(w.cfg.Tick)
			continue
		}
		if err = change(n.Log().Raft()).Error(); err == nil {
			return nil
		}
		time.Sleep(w.cfg.Tick)
	}
	return err
}

// inConfiguration reports whether the leader's latest configuration has d as a
// voter (waiting a few TTLs for a leader; false without one).
func (w *world) inConfiguration(d *device) bool {
	deadline := time.Now().Add(3 * w.cfg.TTL)
	for time.Now().Before(deadline) {
		if l := w.leaderDev(); l >= 0 {
			if n, _ := w.devs[l].node(); n != nil {
				fut := n.Log().Raft().GetConfiguration()
				if fut.Error() == nil {
					for _, s := range fut.Configuration().Servers {
						if string(s.ID) == d.id && s.Suffrage == raft.Voter {
							return true
						}
					}
					return false
				}
			}
		}
		time.Sleep(w.cfg.Tick)
	}
	return false
}

// voters counts the voters in the leader's configuration (0 if no leader).
func (w *world) voters() int {
	l := w.leaderDev()
	if l < 0 {
		return 0
	}
	n, _ := w.devs[l].node()
	if n == nil {
		return 0
	}
	fut := n.Log().Raft().GetConfiguration()
	if fut.Error() != nil {
		return 0
	}
	v := 0
	for _, s := range fut.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// holderDev is the device that holds the lease and may sign now, or else the one the
// most advanced replica names as holder; -1 if none is up.
func (w *world) holderDev() int {
	var best uint64
	named := -1
	for _, d := range w.devs {
		n, _ := d.node()
		if n == nil {
			continue
		}
		if n.Holds() && !d.paused() {
			return d.idx
		}
		if v := n.Log().View(); v.AppliedIndex > best && v.Lease.Holder != "" {
			best, named = v.AppliedIndex, w.devOf(v.Lease.Holder)
		}
	}
	if named >= 0 {
		if n, _ := w.devs[named].node(); n == nil {
			return -1
		}
	}
	return named
}

// leaderDev is a device whose Raft is leader (the one at the highest term if two
// think so), or -1.
func (w *world) leaderDev() int {
	best, term := -1, uint64(0)
	for _, d := range w.devs {
		n, _ := d.node()
		if n == nil || d.paused() {
			continue
		}
		r := n.Log().Raft()
		if r.State() != raft.Leader {
			continue
		}
		if t := r.CurrentTerm(); best < 0 || t > term {
			best, term = d.idx, t
		}
	}
	return best
}

// pickDev picks a device satisfying ok, at random.
func (w *world) pickDev(rng interface{ IntN(int) int }, ok func(int) bool) int {
	var cands []int
	for i := range w.cfg.Devices {
		if ok(i) {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return -1
	}
	return cands[rng.IntN(len(cands))]
}

// waitActions waits for the fault actions still running (a release, a crash), ending
// pauses meanwhile: an action on a paused device (its proposal parked) would
// otherwise wait for a resume that only the heal brings.
func (w *world) waitActions() {
	w.mu.Lock()
	w.healed = true // actions that start now do nothing
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.opWG.Wait()
		close(done)
	}()
	for {
		for _, d := range w.devs {
			d.resume()
		}
		select {
		case <-done:
			return
		case <-time.After(w.cfg.Tick):
		}
	}
}

// healAll ends every fault: links back to normal, paused devices resumed, crashed
// ones restarted, removed ones re-joined, clock rates back to 1 (their offsets stay:
// NTP slews, it does not step back).
func (w *world) healAll() {
	w.mu.Lock()
	ids := make([]int, 0, len(w.active))
	for id := range w.active {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	sort.Ints(ids)
	for _, id := range ids {
		w.heal(id)
	}
	w.mu.Lock()
	clear(w.linkFs)
	w.mu.Unlock()
	w.applyLinks()
	for _, d := range w.devs {
		d.resume()
		d.clock.SetRate(1)
		if n, _ := d.node(); n == nil {
			w.restart(d)
		}
	}
	for _, d := range w.devs {
		w.rejoin(d)
	}
	w.ev.add(-1, "healed", "all faults over")
}
