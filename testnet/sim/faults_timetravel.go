package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/signer/node"
)

// Time travel (issue 38 item 7): a device's disk goes back in time. Raft assumes a
// voter's disk never does; personal devices' disks do (a laptop restored from last
// month's backup, a phone from its cloud backup, a re-imaged home server). A run of a
// profile with Profile.FounderAlone starts as a real cluster does: dev0 bootstraps
// alone (its first start's configuration names only itself), signs a commit, is
// stopped, and a copy of its data dir (and, apart, of its mark <dir>.mark) is kept:
// the founder's backup from before anyone joined. Then dev0 starts again and the
// others join (they never bootstrap: the leader adds them as voters through its
// raft.Raft, as the re-join of a removed member does); each joiner's disk from
// before it joined (no data dir, no mark) is its first copy. During the run:
//
//   - FBackup stops a device (kill -9), copies its data dir and its mark, and starts
//     it again: copies of every device at varying ages (up to maxCopies each, the
//     pre-join copies always kept);
//   - FTimeTravel kills a device and puts its data dir back to one of its copies
//     (half the time its pre-join copy: for dev0 the founder's backup, for the
//     others no data dir at all), restored in place: the
//     mark beside the dir survives, so the start sees the dir behind it and is fenced
//     (signer/node fence.go): it must neither campaign, lead, claim nor sign until it
//     has caught up, even when the copy's configuration names it alone (item 1: with
//     the knob fence-filters-only it elects itself with no message sent and signs a
//     second commit for a seq the others hold: VFork);
//   - FTimeTravelWhole does the same with the mark rolled back too (put back to its
//     copy, or removed if the copy had none): a whole-disk restore. Nothing on the
//     device says it went back in time; the members remember what it stored (item 2,
//     peer memory) and fence it when one that knows more is reachable at its start,
//     but the founder's pre-join backup so restored knows no member to ask, elects
//     itself alone and forks. The known limit, kept out of profile
//     timetravel and shown by profile timetravel-whole (TestTimeTravelWholeDiskLimit).
//
// The heal of either restore starts the device on the restored dir. Like the repair
// faults, a restore works on one device at a time (takeRepairSlot) and waits while
// another restored device has not caught up (othersCatchingUp).
const (
	FBackup          = "backup"           // a stopped device's data dir and mark copied (a backup), the device started again
	FTimeTravel      = "timetravel"       // a device's data dir put back to an earlier copy, its mark kept (detectable)
	FTimeTravelWhole = "timetravel-whole" // the same with its mark rolled back too (a whole-disk restore: not detectable)
)

// maxCopies bounds the copies kept of one device's data dir (besides the founder's
// pre-join backup): the oldest goes first.
const maxCopies = 3

// dirCopy is a kept copy of a device's data dir.
type dirCopy struct {
	dir     string        // the copy of the data dir
	mark    string        // the copy of its mark ("": it had none)
	at      time.Duration // virtual time it was taken
	prejoin bool          // from before the others joined (dev0) or before this device joined
	empty   bool          // no data dir at all (a joiner's disk before it joined)
	label   string
}

func init() {
	// timetravel: dev0 founds the cluster alone; backups of any device at any time,
	// restored in place (the mark kept), among crashes, partitions and handovers.
	profiles["timetravel"] = Profile{Name: "timetravel", FounderAlone: true, FaultEvery: 700 * time.Millisecond,
		Weights: map[string]int{FTimeTravel: 4, FBackup: 3, FCrash: 2, FPartition: 1, FDelay: 1, FPause: 1,
			FLeadership: 1, FRelease: 1, FTransfer: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
	// timetravel-whole: the same with whole-disk restores (the mark rolled back too),
	// which nothing detects today (issue 38 item 2): its seeds find forks, the known
	// limit (TestTimeTravelWholeDiskLimit). Not in any default draw.
	profiles["timetravel-whole"] = Profile{Name: "timetravel-whole", FounderAlone: true, FaultEvery: 700 * time.Millisecond,
		Weights: map[string]int{FTimeTravelWhole: 6, FBackup: 2, FCrash: 1, FPartition: 1, FLeadership: 1, FTransfer: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
}

// timeTravelAction fills in a backup or restore fault drawn by the schedule.
func timeTravelAction(a *action, rng interface{ IntN(int) int }, target func() (Target, int)) {
	a.Target, a.Dev = target()
	a.Dur = time.Duration(300+rng.IntN(2700)) * time.Millisecond
	if a.Kind == FBackup {
		a.Dur = time.Duration(50+rng.IntN(450)) * time.Millisecond
	}
}

// markPath is the mark file of a data dir (node.Config.MarkFile's default).
func markPath(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return filepath.Clean(abs) + node.MarkSuffix
}

// foundAlone starts the cluster of a FounderAlone profile (see the top of this file).
func (w *world) foundAlone() error {
	d0 := w.devs[0]
	d0.mu.Lock()
	d0.servers = []raft.Server{{ID: raft.ServerID(d0.id), Address: raft.ServerAddress(d0.id), Suffrage: raft.Voter}}
	d0.mu.Unlock()
	if err := d0.start(); err != nil {
		return err
	}
	d0.mu.Lock()
	d0.servers = nil // from now on every start names every member (it knows them)
	d0.mu.Unlock()
	w.ev.add(0, "found", "dev0 bootstrapped alone")
	if err := w.submitTo(d0, "founder-1"); err != nil {
		return fmt.Errorf("dev0 alone: %w", err)
	}
	d0.crash(false, "", 0)
	c, err := w.keepCopy(d0)
	if err != nil {
		return err
	}
	c.prejoin, c.label = true, "the founder's backup from before anyone joined"
	w.mu.Lock()
	w.copies[0] = []*dirCopy{c}
	w.mu.Unlock()
	w.ev.add(0, "found", "dev0 stopped and copied (%s)", c.label)
	if err := d0.start(); err != nil {
		return err
	}
	for _, d := range w.devs[1:] {
		d.mu.Lock()
		d.joins = true
		d.mu.Unlock()
		if err := d.start(); err != nil {
			return err
		}
		err := w.membership(func(r *raft.Raft) raft.Future {
			return r.AddVoter(raft.ServerID(d.id), raft.ServerAddress(d.id), 0, w.cfg.TTL)
		})
		w.ev.add(d.idx, "join", "added as a voter: %s", errText(err))
		if err != nil {
			return fmt.Errorf("dev%d: join: %w", d.idx, err)
		}
		w.mu.Lock()
		w.copies[d.idx] = []*dirCopy{{prejoin: true, empty: true, label: "its disk from before it joined (no data dir)"}}
		w.mu.Unlock()
	}
	// Every device has the founder's commit before the faults begin.
	deadline := time.Now().Add(5 * w.cfg.TTL)
	for _, d := range w.devs {
		for {
			n, _ := d.node()
			if n != nil && n.Log().View().Head.Seq >= 1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("dev%d has not applied the founder's commit %v after the joins", d.idx, 5*w.cfg.TTL)
			}
			time.Sleep(w.cfg.Tick)
		}
	}
	w.setupEnd = w.since()
	w.ev.add(-1, "found", "every device joined; the faults start")
	return nil
}

// submitTo submits one intent to d and waits for its signature (a few TTLs).
func (w *world) submitTo(d *device, id string) error {
	deadline := time.Now().Add(5 * w.cfg.TTL)
	for {
		n, _ := d.node()
		if n == nil {
			return errDown
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
		r, err := n.Submit(ctx, w.intentOf(id), node.WaitSigned)
		cancel()
		if err == nil {
			w.chk.ack(id, r)
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(w.cfg.Tick)
	}
}

// keepCopy copies d's data dir and its mark (d is down).
func (w *world) keepCopy(d *device) (*dirCopy, error) {
	w.mu.Lock()
	w.copyN++
	num := w.copyN
	w.mu.Unlock()
	base := filepath.Join(w.dir, fmt.Sprintf("dev%d.copy%d", d.idx, num))
	c := &dirCopy{dir: base, at: w.since(), label: fmt.Sprintf("copy %d", num)}
	if err := copyDir(d.dir, base); err != nil {
		return nil, err
	}
	switch err := copyFile(markPath(d.dir), base+node.MarkSuffix); {
	case err == nil:
		c.mark = base + node.MarkSuffix
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	return c, nil
}

// addCopy keeps c among dev's copies, dropping the oldest beyond maxCopies (never
// the pre-join copy).
func (w *world) addCopy(dev int, c *dirCopy) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := append(w.copies[dev], c)
	var kept []*dirCopy
	n := 0
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].prejoin || n < maxCopies {
			kept = append([]*dirCopy{cs[i]}, kept...)
			if !cs[i].prejoin {
				n++
			}
			continue
		}
		_ = os.RemoveAll(cs[i].dir)
		_ = os.Remove(cs[i].dir + node.MarkSuffix)
	}
	w.copies[dev] = kept
}

// injectTimeTravel applies a backup or a restore to dev.
func (w *world) injectTimeTravel(a action, dev int) (bool, string) {
	d := w.devs[dev]
	if a.Kind == FBackup {
		if !d.crash(false, "", 0) {
			return false, ""
		}
		c, err := w.keepCopy(d)
		if err != nil {
			w.setUndo(a.ID, func() { w.restart(d) })
			return true, fmt.Sprintf("backup dev%d: %v: a crash", dev, err)
		}
		w.addCopy(dev, c)
		w.setUndo(a.ID, func() { w.restart(d) })
		return true, fmt.Sprintf("backup dev%d: %s kept (mark %v)", dev, c.label, c.mark != "")
	}
	w.mu.Lock()
	cs := append([]*dirCopy(nil), w.copies[dev]...)
	w.mu.Unlock()
	if len(cs) == 0 || w.othersCatchingUp(dev) {
		return false, ""
	}
	rng := rngFor(a)
	c := cs[rng.IntN(len(cs))]
	if cs[0].prejoin && rng.IntN(2) == 0 {
		c = cs[0] // the pre-join copy half the time (dev0's: the copy item 1 is about)
	}
	if !w.takeRepairSlot(dev) {
		return false, ""
	}
	if !d.crash(false, "", 0) {
		w.mu.Lock()
		w.repairDown = 0
		w.mu.Unlock()
		return false, ""
	}
	whole := a.Kind == FTimeTravelWhole
	err := os.RemoveAll(d.dir)
	if err == nil && !c.empty {
		err = copyDir(c.dir, d.dir)
	}
	if err == nil && whole {
		if c.mark != "" {
			err = copyFile(c.mark, markPath(d.dir))
		} else if rerr := os.Remove(markPath(d.dir)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = rerr
		}
	}
	w.markUnsynced(dev)
	w.setUndo(a.ID, func() {
		w.restart(d)
		w.mu.Lock()
		w.repairDown = 0
		w.mu.Unlock()
	})
	how := "in place (its mark kept)"
	if whole {
		how = "whole disk (its mark rolled back too)"
	}
	detail := fmt.Sprintf("dev%d restored from %s, taken at %.3fs, %s", dev, c.label, c.at.Seconds(), how)
	if c.empty {
		detail = fmt.Sprintf("dev%d restored to %s, %s", dev, c.label, how)
	}
	if err != nil {
		detail += ": " + err.Error()
	}
	return true, detail
}
