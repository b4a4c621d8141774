package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

// Repair and restore faults (issue 20 items 2-4 and 6): what an operator does to a
// device whose disk went bad. Each kills the device first (kill -9), changes its data
// dir, and the heal restarts it on that dir. The invariants stay the same (no fork,
// nothing acknowledged lost, liveness once healed): a device that lost its log must
// not help elect a leader that lacks an entry it had acknowledged, and the founder
// (every simulated device bootstraps: they all hold the same server list) must
// rejoin instead of refusing to start or bootstrapping again.
const (
	FRepair  = "repair"  // baton repair: the log, state and snapshots dropped, term and vote kept
	FLostDB  = "lostdb"  // raft.db (Damage "raft") or state.db ("state") lost
	FRestore = "restore" // the first time a copy of the (stopped) data dir is kept; the next, the dir is put back to it
	// FRepairBehind is issue 20 item 2's story as one fault: devices fall behind
	// (down while the others commit), another device is repaired, and every device
	// that holds the latest entries dies; the stale and the repaired devices start
	// together and make a majority. A repaired device that voted at once would elect
	// a stale leader, which overwrites acknowledged commits. The heal brings the dead
	// back.
	FRepairBehind = "repairbehind"
)

// backupSuffix names a device's kept copy of its data dir (outside the dir; its mark
// beside the dir is not part of the copy).
const backupSuffix = ".backup"

func init() {
	// repair: the disk faults among crashes, partitions and pauses, under load.
	profiles["repair"] = Profile{Name: "repair", FaultEvery: 900 * time.Millisecond,
		Weights: map[string]int{FRepair: 3, FLostDB: 2, FRestore: 3, FCrash: 2, FPartition: 2, FPause: 1,
			FRelease: 1, FTransfer: 1, FLeadership: 1, FDelay: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
	// repair-crash: log losses overlapping crashes of the others, the mix where a
	// device that lost its log could help a stale device to a quorum (item 2).
	profiles["repair-crash"] = Profile{Name: "repair-crash", FaultEvery: 500 * time.Millisecond,
		Weights: map[string]int{FRestore: 4, FRepair: 3, FLostDB: 1, FCrash: 5, FRepairBehind: 2},
		Clients: 4, Think: 40 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
	// repair-behind: repair-crash with item 2's story (FRepairBehind) drawn most
	// often, for the bug case that must find it (faults_repair_test.go).
	profiles["repair-behind"] = Profile{Name: "repair-behind", FaultEvery: 500 * time.Millisecond,
		Weights: map[string]int{FRestore: 1, FRepair: 1, FCrash: 2, FRepairBehind: 6},
		Clients: 4, Think: 40 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
}

// diskAction fills in a disk fault drawn by the schedule.
func diskAction(a *action, rng interface{ IntN(int) int }, target func() (Target, int)) {
	a.Dur = time.Duration(300+rng.IntN(2700)) * time.Millisecond
	a.Target, a.Dev = target()
	if a.Kind == FRepairBehind {
		a.Dur = time.Duration(1500+rng.IntN(2500)) * time.Millisecond // the lag is 300-1000 ms of it
		a.Frac = float64(300+rng.IntN(700)) / 1000
	}
	if a.Kind == FLostDB {
		a.Damage = "raft"
		if rng.IntN(2) == 0 {
			a.Damage = "state"
		}
	}
}

// injectRepair applies a repair, lost-db or restore fault to dev. Like an operator, it
// works on one device at a time: a disk fault while another device is down from one,
// or has not caught up after one, is skipped. (Devices that lost their logs while
// none of them caught up may together hold no copy of an acknowledged entry: they
// wait, safely and for good, for a copy that may never come back; that is what the
// in-process test of a repair everywhere checks, not a liveness the simulator can
// ask for.)
func (w *world) injectRepair(a action, dev int) (bool, string) {
	if a.Kind == FRepairBehind {
		return w.injectRepairBehind(a, dev)
	}
	if w.othersCatchingUp(dev) {
		return false, ""
	}
	if !w.takeRepairSlot(dev) {
		return false, ""
	}
	d := w.devs[dev]
	if !d.crash(false, "", 0) { // down already (another fault's restart brings it back)
		w.mu.Lock()
		w.repairDown = 0
		w.mu.Unlock()
		return false, ""
	}
	var detail string
	var err error
	switch a.Kind {
	case FRepair:
		if err = node.MarkRejoin(d.dir, "sim repair"); err == nil {
			err = intentlog.Repair(d.dir)
		}
		detail = fmt.Sprintf("repair dev%d", dev)
	case FLostDB:
		f := intentlog.RaftFile
		if a.Damage == "state" {
			f = intentlog.StateFile
		}
		err = os.Remove(filepath.Join(d.dir, f))
		detail = fmt.Sprintf("dev%d lost %s", dev, f)
	case FRestore:
		backup := d.dir + backupSuffix
		if _, serr := os.Stat(backup); serr == nil {
			if err = os.RemoveAll(d.dir); err == nil {
				err = copyDir(backup, d.dir)
			}
			_ = os.RemoveAll(backup)
			detail = fmt.Sprintf("dev%d restored from its older copy", dev)
		} else {
			err = copyDir(d.dir, backup)
			detail = fmt.Sprintf("dev%d copied (a backup)", dev)
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		detail += ": " + err.Error()
	}
	if a.Kind != FRestore || strings.Contains(detail, "restored") {
		w.markUnsynced(dev)
	}
	w.setUndo(a.ID, func() {
		w.restart(d)
		w.mu.Lock()
		w.repairDown = 0
		w.mu.Unlock()
	})
	return true, detail
}

// injectRepairBehind: dev is repaired (it must not be the Raft leader; nor, as with
// the other repair faults, may another device be down from one or catching up after
// one); q-1 other devices that are not the leader (q a majority) are killed first and
// stay down for a.Frac seconds while the rest commit; then dev is killed and
// repaired, the devices that stayed up (the leader among them) are killed, and the
// stale ones and dev start again. The heal restarts the rest.
func (w *world) injectRepairBehind(a action, dev int) (bool, string) {
	lead := w.leaderDev()
	if lead < 0 || dev < 0 || dev == lead {
		return false, ""
	}
	for _, od := range w.devs {
		if n, _ := od.node(); n == nil || n.State().Rejoin != nil {
			return false, "" // every device up and none catching up after a repair
		}
	}
	if w.othersCatchingUp(dev) {
		return false, ""
	}
	if !w.takeRepairSlot(dev) {
		return false, ""
	}
	done := func() {
		w.mu.Lock()
		w.repairDown = 0
		w.mu.Unlock()
	}
	n := len(w.devs)
	var stale, upToDate []int
	for o := (dev + 1) % n; o != dev; o = (o + 1) % n {
		if o != lead && len(stale) < n/2 {
			stale = append(stale, o)
		} else {
			upToDate = append(upToDate, o)
		}
	}
	if len(stale) < n/2 {
		done()
		return false, ""
	}
	for _, o := range stale {
		w.devs[o].crash(false, "", 0)
	}
	time.Sleep(time.Duration(a.Frac * float64(time.Second)))
	d := w.devs[dev]
	var err error
	if d.crash(false, "", 0) {
		if err = node.MarkRejoin(d.dir, "sim repair"); err == nil {
			err = intentlog.Repair(d.dir)
		}
		w.markUnsynced(dev)
	}
	for _, o := range upToDate {
		w.devs[o].crash(false, "", 0)
	}
	for _, o := range append(stale, dev) {
		w.restart(w.devs[o])
	}
	detail := fmt.Sprintf("dev%d repaired; stale %v restarted with it; %v down", dev, stale, upToDate)
	if err != nil {
		detail += ": " + err.Error()
	}
	w.setUndo(a.ID, func() {
		for _, o := range upToDate {
			w.restart(w.devs[o])
		}
		done()
	})
	return true, detail
}

// markUnsynced records that dev's Raft log was dropped or rolled back: it catches up
// once it runs with no fence and has applied what the others had applied now (a
// device that joins again as a new member, with a fresh raft.db, has no fence to
// drop).
func (w *world) markUnsynced(dev int) {
	var target uint64
	for o, od := range w.devs {
		if o == dev {
			continue
		}
		if n, _ := od.node(); n != nil {
			target = max(target, n.Log().View().AppliedIndex)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unsynced == nil {
		w.unsynced = map[int]uint64{}
	}
	w.unsynced[dev] = target
}

// othersCatchingUp reports whether a device other than dev lost its log and has not
// been seen caught up since: running with its fence up or behind what the others had
// applied when it lost its log, or down after losing it. A second log loss then could
// leave no majority that holds the history (a repair of a majority: every fenced
// device waits for good, docs/DESIGN.md), which an operator repairing one device at
// a time does not do.
func (w *world) othersCatchingUp(dev int) bool {
	busy := false
	for o, od := range w.devs {
		if o == dev {
			continue
		}
		n, _ := od.node()
		fenced := n != nil && n.State().Rejoin != nil
		var applied uint64
		if n != nil {
			applied = n.Log().View().AppliedIndex
		}
		w.mu.Lock()
		target, lost := w.unsynced[o]
		switch {
		case !lost:
		case fenced || n == nil || applied < target:
			busy = true // down since it lost its log, or not caught up
		default:
			delete(w.unsynced, o) // running, no fence, caught up
		}
		w.mu.Unlock()
	}
	return busy
}

// takeRepairSlot marks dev down from a disk fault unless another device is (one at a
// time, as an operator works); it reports whether it did.
func (w *world) takeRepairSlot(dev int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.repairDown != 0 || w.diskDownLocked() {
		return false
	}
	w.repairDown = dev + 1
	return true
}

// copyDir copies a data dir (regular files and directories).
func copyDir(from, to string) error {
	return filepath.WalkDir(from, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		return copyFile(p, dst)
	})
}
