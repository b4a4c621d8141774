package sim

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/batonhq/baton/internal/devclock"
)

// FClone (issue 38 item 4): a copy of a device's data dir, with its mark, started
// beside the original with the same identity (a cloned VM, a dir copied to a second
// machine). Both run: some of the other devices' connections to that identity reach
// the clone, the others the original (as libp2p peers dialing one peer ID reach
// whichever process answered). The clone's dir is one of the device's kept copies
// (faults_timetravel.go), its mark copied with it, so nothing on it says it is a
// copy. The members detect two live processes with one identity from their memory
// calls (signer/node clone.go: two incarnations calling); a clone of the founder's
// pre-join copy knows no member, calls none, and leads a one-device cluster of its
// own: the limit, in no default draw, profile timetravel-clone only (TestCloneLimit). One clone at a time;
// the heal stops it.
const FClone = "clone"

func init() {
	profiles["timetravel-clone"] = Profile{Name: "timetravel-clone", FounderAlone: true, FaultEvery: 700 * time.Millisecond,
		Weights: map[string]int{FClone: 4, FBackup: 3, FCrash: 1, FPartition: 1, FLeadership: 1, FTransfer: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
}

// cloneInc numbers a clone's incarnations apart from its original's (events, the
// checker's scans).
const cloneInc = 1000

// injectClone starts a clone of dev from one of its kept copies.
func (w *world) injectClone(a action, dev int) (bool, string) {
	w.mu.Lock()
	busy := w.clone != nil
	var cs []*dirCopy
	for _, c := range w.copies[dev] {
		if !c.empty {
			cs = append(cs, c)
		}
	}
	w.mu.Unlock()
	if busy || len(cs) == 0 {
		return false, ""
	}
	rng := rngFor(a)
	c := cs[rng.IntN(len(cs))]
	if cs[0].prejoin && rng.IntN(2) == 0 {
		c = cs[0] // the founder's pre-join backup half the time, as a restore draws it
	}
	d := w.devs[dev]
	var from []int
	for o := range w.devs {
		if o != dev && rng.IntN(2) == 0 {
			from = append(from, o)
		}
	}
	if len(from) == 0 {
		o := (dev + 1 + rng.IntN(len(w.devs)-1)) % len(w.devs)
		from = []int{o}
	}
	cl := &device{w: w, idx: dev, id: d.id, dir: filepath.Join(w.dir, fmt.Sprintf("dev%d.clone%d", dev, a.ID)),
		flush: filepath.Join(w.dir, fmt.Sprintf("dev%d.clone%d.flushed", dev, a.ID)), clock: devclock.New(),
		op: make(chan struct{}, 1), key: d.key, joins: true, inc: cloneInc, cloneFrom: from}
	err := copyDir(c.dir, cl.dir)
	if err == nil && c.mark != "" {
		err = copyFile(c.mark, markPath(cl.dir))
	}
	if err == nil {
		err = cl.start()
	}
	if err != nil {
		return true, fmt.Sprintf("clone of dev%d from %s: %v", dev, c.label, err)
	}
	w.mu.Lock()
	w.clone = cl
	w.mu.Unlock()
	w.setUndo(a.ID, func() {
		cl.stop()
		cl.clock.StopTimers()
		w.mu.Lock()
		w.clone = nil
		w.mu.Unlock()
		w.ev.add(dev, "clone", "the clone stopped")
	})
	return true, fmt.Sprintf("clone of dev%d started from %s (taken at %.3fs, its mark with it), reached by %v", dev, c.label, c.at.Seconds(), from)
}
