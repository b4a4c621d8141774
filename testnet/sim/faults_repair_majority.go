package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

// FRepairMajority is `baton repair` on a majority of the devices before any of them
// caught up (issue 20 item 6, "repair ... on a majority": an operator who repairs
// every device that reported a bad disk, one after the other). The fault first takes
// the other devices down for a while, so that the majority commits entries only it
// holds, brings them back, then repairs the majority. Each repaired device is fenced:
// it neither votes nor campaigns until it has applied a barrier from a leader, and
// the devices that kept their logs are a minority that lacks the latest entries, so
// no leader is elected: every device waits, safely and for good (docs/DESIGN.md,
// "Repair, restore and backups": the history after the last backup comes back only
// with a device that holds it; here none does). So the run asks no liveness and no
// convergence after it, and no acknowledged intent can be asked for (their only
// copies were repaired away); it asks that nothing forks: no second history at a seq
// already applied (VFork). With the knob no-fence the repaired devices vote at once,
// elect a device of the minority, and it writes over the entries it lacks: another
// commit at an applied seq (VFork).
const FRepairMajority = "repairmajority"

func init() {
	// repair-majority: load, a few crashes and partitions, then a majority repaired.
	profiles["repair-majority"] = Profile{Name: "repair-majority", FaultEvery: 900 * time.Millisecond,
		Weights: map[string]int{FRepairMajority: 2, FCrash: 1, FPartition: 1, FLeadership: 1, FDelay: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
}

// injectRepairMajority: once per run, with every device up and none catching up.
func (w *world) injectRepairMajority(a action, dev int) (bool, string) {
	w.mu.Lock()
	done := w.majorityRepaired
	w.mu.Unlock()
	if done || dev < 0 {
		return false, ""
	}
	for _, od := range w.devs {
		if n, _ := od.node(); n == nil || od.paused() || od.isRemoved() || n.State().Rejoin != nil {
			return false, ""
		}
	}
	if w.othersCatchingUp(-1) || !w.takeRepairSlot(dev) {
		return false, ""
	}
	n := len(w.devs)
	var majority, minority []int
	for i := range n {
		if o := (dev + i) % n; i < n/2+1 {
			majority = append(majority, o)
		} else {
			minority = append(minority, o)
		}
	}
	w.mu.Lock()
	w.majorityRepaired = true // from here the repair slot stays taken: no other disk fault
	w.mu.Unlock()
	// The minority falls behind while the majority commits.
	for _, o := range minority {
		w.devs[o].crash(false, "", 0)
	}
	time.Sleep(time.Duration((0.5 + a.Frac) * float64(time.Second)))
	for _, o := range minority {
		w.restart(w.devs[o])
	}
	var errs []string
	for _, o := range majority {
		d := w.devs[o]
		if !d.crash(false, "", 0) {
			continue
		}
		err := node.MarkRejoin(d.dir, "sim repair")
		if err == nil {
			err = intentlog.Repair(d.dir)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("dev%d: %v", o, err))
		}
		w.markUnsynced(o)
	}
	for _, o := range majority {
		w.restart(w.devs[o])
	}
	detail := fmt.Sprintf("devices %v repaired (a majority of %d), %v were behind", majority, n, minority)
	if len(errs) > 0 {
		detail += ": " + strings.Join(errs, "; ")
	}
	return true, detail
}
