package sim

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

// checker holds what the invariants need and checks them while the run goes on:
//
//   - chains: every device's applied chain, read as it grows, must be a prefix of
//     one reference chain (a different commit at a seq is a fork), which verifies
//     commit by commit in its format (chain.NewStepper: chain.ChainVerifier, or on
//     an atproto chain the repository replayed; and atproto.Links: no two commits
//     with one rev or one prevData); no intent ID twice in it; every
//     applied commit is one the recording key signed;
//   - leases: every record a device's replica shows is noted with the virtual time
//     it was first seen anywhere; one epoch never has two holders and a replica's
//     epoch never goes back; from the lease history, claim/steal/transfer epochs
//     strictly increase, and a claim (not a steal) that replaced another holder's
//     record must come at least 0.9 TTL after that record first appeared (a
//     claimant must have observed it unchanged for a TTL on a clock running at most
//     1.1x); a record nobody ever saw replaced by a claim is the same finding;
//   - holds: per device, the intervals in which Lease.Tenure reports a hold (from
//     the moment it is seen until its Done closes; a paused device's hold is cut at
//     the pause); two devices holding at one virtual instant is a violation unless
//     an operator's steal lies between their epochs;
//   - acknowledgements: two acks of one ID must name the same Raft index, and at
//     the end every acknowledged ID is in the converged chain.
type checker struct {
	w     *world
	ver   chain.Stepper
	links *atproto.Links // atproto chains only

	mu sync.Mutex
	// chains
	hashes  [][chain.HashSize]byte
	firstAt []time.Duration // when each seq was first applied anywhere
	opSeq   map[string]uint64
	nops    int
	scanned map[int][2]int // device -> {incarnation, seq read up to}
	// acknowledgements
	acks   map[string]uint64
	gaveup []string
	// leases
	firstSeen map[recKey]time.Duration
	// proposedAt: when a record's entry was first proposed (a lease entry's
	// BeforePropose): the record's age is counted from there, since a standby counts
	// it from when its replica stored the entry (election.StoreTimer), which may come
	// long before any replica applies it (a leader that died before the commit).
	proposedAt  map[recKey]time.Duration
	epochHolder map[uint64]string
	histIndex   uint64
	histEpoch   uint64
	histWait    int // ticks a history event waited for its record to be seen
	steals      map[uint64]bool
	// holds
	open     map[int]*holdIv
	paused   map[int]bool
	overlaps []overlap
	// lost: the (device, epoch) holds that ended with no hold of the same device
	// following on (an "unholds" event), as opposed to a bump to the next epoch.
	lost map[[2]uint64]bool
	// defects: per device and incarnation, the commits its loop saw refused for their
	// content by a defect (signer.Defect: not a race on the dedupe window nor a full
	// one), under mu: the moves to a next epoch they caused get no allowance in the
	// bound of check_refused.go.
	defects map[[2]int]uint64

	failover time.Duration
}

type recKey struct {
	holder string
	epoch  uint64
	ts     int64
}

type holdIv struct {
	dev, inc int
	epoch    uint64
	start    time.Duration
	done     <-chan struct{}
}

type overlap struct {
	a, b holdIv
	at   time.Duration
}

const (
	holdPoll  = 20 * time.Millisecond  // safety net of the hold tracker (it wakes on every applied change)
	checkTick = 100 * time.Millisecond // chains and lease history are read this often
)

func newChecker(w *world) *checker {
	ver, err := chain.NewStepper(w.format(), w.key.DID())
	if err != nil {
		panic(err) // the fixed key's did always parses
	}
	var links *atproto.Links
	if w.cfg.atproto() {
		links = atproto.NewLinks()
	}
	return &checker{w: w, ver: ver, links: links, opSeq: map[string]uint64{}, scanned: map[int][2]int{}, acks: map[string]uint64{},
		firstSeen: map[recKey]time.Duration{}, proposedAt: map[recKey]time.Duration{}, epochHolder: map[uint64]string{}, steals: map[uint64]bool{},
		open: map[int]*holdIv{}, paused: map[int]bool{}, lost: map[[2]uint64]bool{}, failover: -1}
}

func (c *checker) length() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hashes)
}

func (c *checker) ops() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nops
}

func (c *checker) acked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acks)
}

// run reads the chains and the lease history every checkTick until the run ends.
func (c *checker) run() {
	defer c.w.monWG.Done()
	t := time.NewTicker(checkTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.scanHistory()
			c.resolveOverlaps(false)
		case <-c.w.done:
			return
		}
	}
}

// watch follows one incarnation of a device: every lease record its replica shows,
// and its holds.
func (c *checker) watch(d *device, inc int, n *node.Node, ep *endpoint) {
	defer c.w.monWG.Done()
	lg := n.Log()
	var last intentlog.Lease
	var lastEpoch, lastIdx uint64
	first, quiet := true, false
	poll := time.NewTimer(holdPoll)
	defer poll.Stop()
	for {
		var ch <-chan struct{}
		if !quiet {
			ch = lg.Watch()
		}
		v := lg.View()
		if first || v.Lease != last {
			c.leaseSeen(d.idx, v.Lease, &lastEpoch)
			last, first = v.Lease, false
		}
		c.scanDevice(d.idx, inc, n)
		c.checkHold(d, inc, n, ep)
		c.checkRefusals(d, inc, n) // check_refused.go
		quiet = false
		select {
		case <-ch:
			// A watch that fires with nothing applied (a closing log) is not waited
			// on again until the next poll.
			idx := lg.View().AppliedIndex
			quiet = idx == lastIdx
			lastIdx = idx
		case <-poll.C:
			poll.Reset(holdPoll)
		case <-ep.dead:
			return
		case <-c.w.done:
			return
		}
	}
}

func fmtLease(l intentlog.Lease, w *world) string {
	if l.Holder == "" {
		return fmt.Sprintf("free epoch=%d", l.Epoch)
	}
	return fmt.Sprintf("dev%d epoch=%d ts=%d", w.devOf(l.Holder), l.Epoch, l.TS)
}

func (c *checker) leaseSeen(dev int, l intentlog.Lease, lastEpoch *uint64) {
	w := c.w
	w.ev.add(dev, "lease", "%s", fmtLease(l, w))
	if l.Epoch < *lastEpoch {
		w.violation(VEpochReuse, dev, "the replica's lease epoch went back from %d to %d", *lastEpoch, l.Epoch)
	}
	*lastEpoch = l.Epoch
	if l.Holder == "" {
		return
	}
	now := w.ev.now()
	c.mu.Lock()
	k := recKey{l.Holder, l.Epoch, l.TS}
	if _, ok := c.firstSeen[k]; !ok {
		c.firstSeen[k] = now
	}
	h, ok := c.epochHolder[l.Epoch]
	if !ok {
		c.epochHolder[l.Epoch] = l.Holder
	}
	c.mu.Unlock()
	if ok && h != l.Holder {
		w.violation(VEpochReuse, dev, "epoch %d held by dev%d and by dev%d", l.Epoch, w.devOf(h), w.devOf(l.Holder))
	}
}

// leaseProposed notes that the lease record k was proposed now (the first time only).
func (c *checker) leaseProposed(k recKey) {
	now := c.w.ev.now()
	c.mu.Lock()
	if _, ok := c.proposedAt[k]; !ok {
		c.proposedAt[k] = now
	}
	c.mu.Unlock()
}

// checkHold notes a hold of device d (from Lease.Tenure) and checks it against the
// other devices' open holds.
func (c *checker) checkHold(d *device, inc int, n *node.Node, ep *endpoint) {
	if d.paused() {
		return
	}
	t, ok := n.Lease().Tenure()
	if !ok {
		return
	}
	now := c.w.ev.now()
	c.mu.Lock()
	if c.paused[d.idx] {
		c.mu.Unlock()
		return
	}
	if iv := c.open[d.idx]; iv != nil && iv.inc == inc && iv.done == t.Done {
		c.mu.Unlock()
		return
	}
	iv := &holdIv{dev: d.idx, inc: inc, epoch: t.Epoch, start: now, done: t.Done}
	c.open[d.idx] = iv
	for dev, o := range c.open {
		if dev != d.idx {
			c.overlaps = append(c.overlaps, overlap{a: *o, b: *iv, at: now})
		}
	}
	c.mu.Unlock()
	c.w.ev.add(d.idx, "holds", "epoch=%d", t.Epoch)
	c.w.monWG.Add(1)
	go func() {
		defer c.w.monWG.Done()
		select {
		case <-t.Done:
		case <-ep.dead:
		case <-c.w.done:
			return
		}
		c.endHold(iv, "")
	}()
}

func (c *checker) endHold(iv *holdIv, why string) {
	c.mu.Lock()
	cur := c.open[iv.dev] == iv
	if cur {
		delete(c.open, iv.dev)
		c.lost[[2]uint64{uint64(iv.dev), iv.epoch}] = true
	}
	c.mu.Unlock()
	if cur {
		c.w.ev.add(iv.dev, "unholds", "epoch=%d%s", iv.epoch, why)
	}
}

// setPaused marks a device paused (its open hold is cut: a stopped process does
// nothing) or resumed.
func (c *checker) setPaused(dev int, p bool) {
	c.mu.Lock()
	c.paused[dev] = p
	iv := c.open[dev]
	c.mu.Unlock()
	if p && iv != nil {
		c.endHold(iv, " (paused)")
	}
}

// resolveOverlaps decides the overlaps seen so far once the lease history covers
// their epochs (final: with whatever history there is).
func (c *checker) resolveOverlaps(final bool) {
	c.mu.Lock()
	var found []overlap
	kept := c.overlaps[:0]
	for _, o := range c.overlaps {
		lo, hi := min(o.a.epoch, o.b.epoch), max(o.a.epoch, o.b.epoch)
		stolen := false
		for e := lo + 1; e <= hi; e++ {
			stolen = stolen || c.steals[e]
		}
		switch {
		case stolen:
		case c.histEpoch >= hi || final:
			found = append(found, o)
		default:
			kept = append(kept, o)
		}
	}
	c.overlaps = kept
	c.mu.Unlock()
	for _, o := range found {
		c.w.violation(VOverlap, o.b.dev, "dev%d held epoch %d (since %.3fs) while dev%d began holding epoch %d at %.3fs; no steal between",
			o.a.dev, o.a.epoch, o.a.start.Seconds(), o.b.dev, o.b.epoch, o.at.Seconds())
	}
}

// scanChains reads what each running device applied since the last scan.
func (c *checker) scanChains() {
	for _, d := range c.w.devs {
		if n, inc := d.node(); n != nil {
			c.scanDevice(d.idx, inc, n)
		}
	}
}

// scanDevice reads the commits one incarnation of a device applied since the last
// scan (its watcher calls it on every applied change, so the reference chain grows
// at the virtual time the first replica applies a commit).
func (c *checker) scanDevice(dev, inc int, n *node.Node) {
	lg := n.Log()
	head := lg.View().Head.Seq
	c.mu.Lock()
	st := c.scanned[dev]
	c.mu.Unlock()
	if st[0] != inc {
		st = [2]int{inc, 0}
	}
	if uint64(st[1]) >= head {
		return
	}
	for s := uint64(st[1]) + 1; s <= head; s++ {
		raw, err := lg.Commit(s)
		if err != nil {
			break // closing under us
		}
		c.addCommit(dev, s, raw)
		st[1] = int(s)
	}
	c.mu.Lock()
	if cur := c.scanned[dev]; cur[0] != inc || cur[1] < st[1] {
		c.scanned[dev] = st
	}
	c.mu.Unlock()
}

func (c *checker) addCommit(dev int, seq uint64, raw []byte) {
	w := c.w
	h := w.format().Hash(raw)
	c.mu.Lock()
	if int(seq) <= len(c.hashes) {
		ref := c.hashes[seq-1]
		c.mu.Unlock()
		if ref != h {
			w.violation(VFork, dev, "dev%d has %s at seq %d, another replica had %s", dev, short(h[:]), seq, short(ref[:]))
		}
		return
	}
	if int(seq) != len(c.hashes)+1 {
		c.mu.Unlock()
		return // cannot happen: every scan reads from the reference's end or before
	}
	c.hashes = append(c.hashes, h)
	c.firstAt = append(c.firstAt, w.ev.now())
	cm, verr := c.ver.Next(raw)
	var shared []string
	if c.links != nil {
		shared = c.links.Add(seq, raw)
	}
	var dups []string
	for _, op := range cm.Ops {
		c.nops++
		if first, dup := c.opSeq[op.ID]; dup {
			dups = append(dups, fmt.Sprintf("%s (seq %d and %d)", op.ID, first, seq))
			continue
		}
		c.opSeq[op.ID] = seq
	}
	c.mu.Unlock()
	w.ev.add(dev, "applied", "seq=%d epoch=%d signer=dev%d ops=%d %s", seq, cm.Epoch, w.devOf(cm.Signer), len(cm.Ops), short(h[:]))
	if verr != nil {
		w.violation(VInvalid, dev, "seq %d: %v", seq, verr)
	}
	for _, s := range shared {
		w.violation(VFork, dev, "%s", s)
	}
	if len(dups) > 0 {
		w.violation(VDuplicate, dev, "intent applied twice: %s", strings.Join(dups, ", "))
	}
	if !w.sigs.markApplied(raw) {
		w.violation(VUnsigned, dev, "applied commit seq %d was never signed by the recording key", seq)
	}
}

// scanHistory reads the lease history from the most advanced running replica and
// checks the events it has not checked yet.
func (c *checker) scanHistory() {
	var best *node.Node
	var bestIdx uint64
	for _, d := range c.w.devs {
		if n, _ := d.node(); n != nil {
			if v := n.Log().View(); best == nil || v.AppliedIndex > bestIdx {
				best, bestIdx = n, v.AppliedIndex
			}
		}
	}
	if best == nil {
		return
	}
	hist, err := best.LeaseHistory()
	if err != nil {
		return
	}
	w := c.w
	for i := range hist {
		ev := hist[i]
		c.mu.Lock()
		if ev.Index <= c.histIndex {
			c.mu.Unlock()
			continue
		}
		// The event before it, unless the history was trimmed past it.
		var prev *intentlog.LeaseEvent
		if i > 0 {
			prev = &hist[i-1]
		}
		var found []string
		switch ev.Event {
		case "claim", "steal", "transfer":
			if ev.Epoch <= c.histEpoch {
				found = append(found, fmt.Sprintf("%s of epoch %d after epoch %d", ev.Event, ev.Epoch, c.histEpoch))
			}
		}
		if ev.Event == "claim" && prev != nil && prev.Event != "release" && prev.Holder != "" && prev.Holder != ev.Holder {
			tc, okC := c.firstSeen[recKey{ev.Holder, ev.Epoch, ev.TS}]
			if !okC && c.histWait < 10 {
				// The watchers have not noted the claim yet: look again next tick.
				c.histWait++
				c.mu.Unlock()
				return
			}
			tr, okR := c.firstSeen[recKey{prev.Holder, prev.Epoch, prev.TS}]
			if tp, okP := c.proposedAt[recKey{prev.Holder, prev.Epoch, prev.TS}]; okP && okR && tp < tr {
				tr = tp // its age counts from its proposal: standbys may count from their store
			}
			least := time.Duration(0.9 * float64(w.cfg.TTL))
			switch {
			case !okC:
			case !okR:
				found = append(found, fmt.Sprintf("dev%d's claim of epoch %d replaced dev%d's record (%s epoch %d ts %d) that no replica ever showed",
					w.devOf(ev.Holder), ev.Epoch, w.devOf(prev.Holder), prev.Event, prev.Epoch, prev.TS))
			case tc-tr < least:
				found = append(found, fmt.Sprintf("dev%d's claim of epoch %d (seen at %.3fs) replaced dev%d's record (%s epoch %d ts %d, proposed or first seen at %.3fs) after %v, less than 0.9 TTL: a live lease taken",
					w.devOf(ev.Holder), ev.Epoch, tc.Seconds(), w.devOf(prev.Holder), prev.Event, prev.Epoch, prev.TS, tr.Seconds(), (tc-tr).Round(time.Millisecond)))
			}
		}
		c.histWait = 0
		switch ev.Event {
		case "claim", "steal", "transfer":
			c.histEpoch = max(c.histEpoch, ev.Epoch)
		}
		if ev.Event == "steal" {
			c.steals[ev.Epoch] = true
		}
		c.histIndex = ev.Index
		c.mu.Unlock()
		for _, f := range found {
			kind := VLiveTake
			if strings.Contains(f, " after epoch ") {
				kind = VEpochReuse
			}
			w.violation(kind, w.devOf(ev.Holder), "lease history index %d: %s", ev.Index, f)
		}
	}
}

// ack records a client's acknowledgement.
func (c *checker) ack(id string, r node.SubmitResult) {
	c.mu.Lock()
	prev, seen := c.acks[id]
	if !seen {
		c.acks[id] = r.Index
	}
	c.mu.Unlock()
	if seen && prev != r.Index {
		c.w.violation(VAckMismatch, -1, "intent %s acknowledged at index %d and again at index %d (duplicate=%v)", id, prev, r.Index, r.Duplicate)
	}
}

// signedAt returns when the commit that carries intent id was first applied on any
// replica.
func (c *checker) signedAt(id string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq, ok := c.opSeq[id]
	if !ok {
		return 0, false
	}
	return c.firstAt[seq-1], true
}

// gaveUp notes an intent a client stopped retrying unacknowledged.
func (c *checker) gaveUp(id string) {
	c.mu.Lock()
	c.gaveup = append(c.gaveup, id)
	c.mu.Unlock()
}

func (c *checker) givenUp() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, id := range c.gaveup {
		if _, ok := c.acks[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// final runs the end-of-run checks on a converged cluster: every acknowledged ID in
// the chain, nothing refused in a fault-free run, the remaining overlaps decided.
// (The chain was verified as it grew: addCommit feeds the format's chain.Stepper,
// the verifier chain.VerifyChainOf runs, one commit at a time.) On an atproto chain,
// also the repository checks (checkRepos).
func (c *checker) final(converged bool) {
	w := c.w
	c.scanChains()
	c.scanHistory()
	c.resolveOverlaps(true)
	c.mu.Lock()
	var lost []string
	if converged {
		for id := range c.acks {
			if _, ok := c.opSeq[id]; !ok {
				lost = append(lost, id)
			}
		}
	}
	c.mu.Unlock()
	if len(lost) > 0 {
		sortStrings(lost)
		if len(lost) > 10 {
			lost = append(lost[:10], fmt.Sprintf("... (%d in all)", len(lost)))
		}
		w.violation(VLost, -1, "acknowledged but not in the converged chain: %s", strings.Join(lost, ", "))
	}
	c.checkRefusedPerHold() // check_refused.go
	if converged && w.cfg.atproto() {
		w.checkRepos() // format.go
	}
	w.mu.Lock()
	calm := w.faultFree
	w.mu.Unlock()
	if signed, refused := w.sigs.counts(); calm && refused > 0 {
		w.violation(VRefusedCalm, -1, "%d of %d signed commits were never applied, in a run without faults", refused, signed)
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
