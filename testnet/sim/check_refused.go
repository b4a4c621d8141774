package sim

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/node"
)

// Invariants of issue 19.6 on refused commits and health.
const (
	// VContentRefused: the apply refused a commit the holder signed for its content
	// (not the fence nor a race on the head or the dedupe window; a full dedupe window
	// aside: signer.Defect). Every
	// entrance validates an intent with the apply's rule, so it never happens.
	VContentRefused = "content_refused"
	// VRefusedBound: the commits signed under one epoch and never applied exceed the
	// commits a hold may have in flight when it ends.
	VRefusedBound = "refused_bound"
	// VFalseAlarm: a replica raised the divergence alarm; nothing the simulator does
	// makes replicas' states differ.
	VFalseAlarm = "false_alarm"
)

// refusedPerHold is the most commits one epoch may sign that never apply: those in
// flight when the hold ends (the pipeline depth: signer.DefaultMaxInFlight, or 8 with
// the knob max-in-flight-8), plus the one a refusal stopped. A hold may add one such
// window per move to its next epoch that no defect caused (checkRefusedPerHold).
func (k Knobs) refusedPerHold() int {
	return k.maxInFlight() + 1
}

// once reports whether the finding key is new (then it is reported).
func (c *checker) once(kind string, dev, inc int) bool {
	k := fmt.Sprintf("%s/%d/%d", kind, dev, inc)
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.reported == nil {
		c.w.reported = map[string]bool{}
	}
	if c.w.reported[k] {
		return false
	}
	c.w.reported[k] = true
	return true
}

// checkRefusals looks at one device's loop and health (from the watch loop).
func (c *checker) checkRefusals(d *device, inc int, n *node.Node) {
	st := n.RefusalStats()
	var rs []string
	var defects uint64
	for r, v := range st.ContentRefused {
		if signer.Defect(r) && v > 0 {
			rs = append(rs, string(r))
		}
		if signer.Defect(r) {
			defects += v
		}
	}
	c.mu.Lock()
	if c.defects == nil {
		c.defects = map[[2]int]uint64{}
	}
	c.defects[[2]int{d.idx, inc}] = max(c.defects[[2]int{d.idx, inc}], defects)
	c.mu.Unlock()
	if len(rs) > 0 && c.once(VContentRefused, d.idx, inc) {
		sort.Strings(rs)
		c.w.violation(VContentRefused, d.idx, "incarnation %d: commits refused for their content (%s)", inc,
			strings.Join(rs, " "))
	}
	if err := n.Health(); errors.Is(err, node.ErrDiverged) && c.once(VFalseAlarm, d.idx, inc) {
		c.w.violation(VFalseAlarm, d.idx, "incarnation %d: divergence alarm: %v", inc, err)
	}
}

// checkRefusedPerHold checks the signatures at the end of a run: per epoch, the
// signed commits never applied; and counts the seqs signed more than once by cause.
func (c *checker) checkRefusedPerHold() {
	s := c.w.sigs
	s.mu.Lock()
	var all []signedCommit
	bySeq := map[uint64][]signedCommit{}
	refused := map[[32]byte]bool{}
	for d, sc := range s.all {
		if sc.seq == 0 {
			continue // an atproto repository commit signed and never proposed (format.go): no seq known
		}
		all = append(all, sc)
		refused[d] = !s.applied[d]
		bySeq[sc.seq] = append(bySeq[sc.seq], sc)
	}
	s.mu.Unlock()
	// A hold is one device's tenure: the epochs it signed under, in a row, with no
	// other device signing between them (a bump after a refusal stays in the hold).
	// A hold that was lost ("unholds": no hold of the device followed on) ends there,
	// even if the same device claims the next epoch: that claim starts a new hold,
	// with its own bound (seed 462: 8 commits in flight when dev2's hold of epoch 2
	// was lost, then 2 refused races under the hold it claimed next, counted as one
	// hold of 10).
	c.mu.Lock()
	lost := make(map[[2]uint64]bool, len(c.lost))
	for k, v := range c.lost {
		lost[k] = v
	}
	// Each move of the hold to its next epoch voids the window in flight under the
	// last one, and the hold goes on: a bump after a race on the dedupe window
	// (duplicate_op: a client's retry reached the log another way first), a full
	// window (backlog), the fence refusing a copy that reached the log out of order
	// at a leader change, or a re-claim of the device's own record. Each such move
	// may cost one more window (seed 340161: two duplicate_op refusals in a row, 11
	// commits of one hold never applied; seed 610321: a leadership transfer with 9
	// commits in flight, 8 voided by a re-claim of epoch 3, then the hold ended with
	// 2 in flight: 10). Moves after a defect's refusal (a commit refused for its
	// content: the one-request wedge's) get none.
	defects := map[int]uint64{}
	for k, v := range c.defects {
		defects[k[0]] += v
	}
	c.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].epoch != all[j].epoch {
			return all[i].epoch < all[j].epoch
		}
		return all[i].at < all[j].at
	})
	var over []string
	holdDev, holdFrom, lastEpoch, n, moves := -1, uint64(0), uint64(0), 0, 0
	flush := func() {
		if holdDev < 0 {
			return
		}
		extra := max(0, moves-int(defects[holdDev]))
		if bound := c.w.cfg.Knobs.refusedPerHold() * (1 + extra); n > bound {
			over = append(over, fmt.Sprintf("dev%d from epoch %d: %d (bound %d: %d moves to a next epoch, %d after defects)", holdDev, holdFrom, n, bound, moves, defects[holdDev]))
		}
	}
	for _, sc := range all {
		if sc.dev != holdDev || (sc.epoch != lastEpoch && lost[[2]uint64{uint64(sc.dev), lastEpoch}]) {
			flush()
			holdDev, holdFrom, n, moves = sc.dev, sc.epoch, 0, 0
		} else if sc.epoch != lastEpoch {
			moves++
		}
		lastEpoch = sc.epoch
		if refused[sc.digest] {
			n++
		}
	}
	flush()
	if len(over) > 0 {
		sort.Strings(over)
		c.w.violation(VRefusedBound, -1, "signed commits never applied above %d for one hold: %s", c.w.cfg.Knobs.refusedPerHold(), strings.Join(over, ", "))
	}
	// Two signed commits for one seq (one prev, as no fork exists), by cause: the
	// same device under its next epoch (a bump after a refusal), or another device
	// (a handover with commits in flight). Same-epoch pairs are equivocation
	// (signatures.go).
	causes := map[string]int{}
	// On an atproto chain, also the revs signed twice (format.go): a refused commit
	// and the next one on the same prev, both signed by clocks behind that prev's
	// rev, both get its rev + 1.
	revs := map[string]int{}
	for _, sc := range all {
		if sc.rev != "" {
			revs[sc.rev]++
		}
	}
	for _, n := range revs {
		if n > 1 {
			causes["same_rev"] += n - 1
		}
	}
	for _, scs := range bySeq {
		if len(scs) < 2 {
			continue
		}
		sort.Slice(scs, func(i, j int) bool { return scs[i].at < scs[j].at })
		for i := 1; i < len(scs); i++ {
			a, b := scs[i-1], scs[i]
			switch {
			case a.epoch == b.epoch:
				causes["same_epoch"]++
			case a.dev == b.dev:
				causes["bump"]++
			default:
				causes["handover"]++
			}
		}
	}
	c.w.mu.Lock()
	c.w.sameSeq = causes
	c.w.mu.Unlock()
}
