package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// After the faults: liveness and convergence.
//
// Liveness: once every fault is healed (devices restarted and resumed, links
// normal, members re-joined, clock rates 1), a probe intent submitted to any device
// must be signed within failoverBound: one TTL for a standby to see the lease lapse
// (two when a wall clock was stepped: a disagreeing wall clock may delay a claim by
// one more TTL), a tick, two election timeouts (Raft's randomised election), and two
// ticks for the claim, its read barrier and the commit's round trips.
//
// Convergence: then every client's outstanding retries end (acknowledged), and every
// device shows the same head with nothing pending, within convergeSlack more.

const convergeSlack = 10 * time.Second

func (w *world) failoverBound() time.Duration {
	w.mu.Lock()
	stepped := w.stepped
	w.mu.Unlock()
	ttls := time.Duration(1)
	if stepped {
		ttls = 2
	}
	return ttls*w.cfg.TTL + 3*w.cfg.Tick + 2*w.electionTimeout()
}

func (w *world) pastGiveUp() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.giveUpAt.IsZero() && time.Now().After(w.giveUpAt)
}

func (w *world) recover() {
	// Messages delayed before the heal are still on their way: the faults are over
	// when they have arrived.
	if d := time.Until(w.nw.lastDue()); d > 0 {
		w.ev.add(-1, "drain", "messages in flight until %v from now", d.Round(time.Millisecond))
		time.Sleep(d)
	}
	healedAt := w.since()
	bound := w.failoverBound()
	w.mu.Lock()
	w.giveUpAt = time.Now().Add(bound + convergeSlack)
	majority := w.majorityRepaired
	w.mu.Unlock()
	if majority {
		// A majority lost its logs: by design no leader is elected until a device
		// holding the history returns (faults_repair_majority.go): no liveness nor
		// convergence is asked, only that nothing forks. The probe still goes in
		// (a leader elected against the design would sign it).
		if _, ok := w.probe(bound + convergeSlack); ok {
			w.ev.add(-1, "probe", "signed after a majority's repair")
		}
		w.loadWG.Wait()
		w.chk.final(false)
		return
	}

	// Liveness.
	signedAt, ok := w.probe(bound + convergeSlack)
	switch {
	case !ok:
		w.violation(VLiveness, -1, "the probe intent was not signed within %v after the faults stopped (bound %v)%s",
			bound+convergeSlack, bound, w.clusterState())
	case signedAt-healedAt > bound:
		w.violation(VLiveness, -1, "the probe intent was signed %v after the faults stopped, above the bound %v%s",
			(signedAt - healedAt).Round(time.Millisecond), bound, w.clusterState())
	}
	if ok {
		w.chk.failover = signedAt - healedAt
	}

	// Convergence: clients finish, then the replicas agree.
	w.loadWG.Wait()
	converged := false
	for !w.pastGiveUp() {
		if w.converged() {
			converged = true
			break
		}
		time.Sleep(w.cfg.Tick)
	}
	if !converged {
		w.violation(VConverge, -1, "devices did not converge within %v after the faults stopped%s",
			bound+convergeSlack, w.clusterState())
	}
	if ids := w.chk.givenUp(); len(ids) > 0 {
		w.violation(VConverge, -1, "%d client intents never acknowledged (first: %s)", len(ids), ids[0])
	}
	w.chk.final(converged)
}

// probe submits one intent (retrying like a client) and waits until the commit that
// signs it is applied on some replica; it returns that virtual time (since the
// start). A lagging replica does not count against the holder: the devices' catching
// up is the convergence check's.
func (w *world) probe(within time.Duration) (time.Duration, bool) {
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), 0x9e0be))
	deadline := time.Now().Add(within)
	in := w.intentOf("probe")
	acked := false
	for !acked && time.Now().Before(deadline) {
		dev := rng.IntN(w.cfg.Devices)
		n, _ := w.devs[dev].node()
		if n == nil {
			time.Sleep(w.cfg.Tick)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
		r, err := n.Submit(ctx, in, node.WaitCommitted)
		cancel()
		w.ev.add(dev, "probe", "submitted: index %d, %s", r.Index, errText(err))
		if err == nil {
			w.chk.ack(in.ID, r)
			acked = true
			break
		}
		time.Sleep(w.cfg.Tick / 4)
	}
	for acked && time.Now().Before(deadline) {
		if at, ok := w.chk.signedAt(in.ID); ok {
			w.ev.add(-1, "probe", "signed at %.3fs", at.Seconds())
			return at, true
		}
		time.Sleep(w.cfg.Tick / 10)
	}
	return 0, false
}

// converged: every device up, all at the same head, nothing pending.
func (w *world) converged() bool {
	var head, genesis [32]byte
	var seq uint64
	for i, d := range w.devs {
		n, _ := d.node()
		if n == nil {
			return false
		}
		v := n.Log().View()
		// Every device has applied the one genesis the bootstrapper wrote.
		if v.Pending > 0 || v.Genesis.Index == 0 {
			return false
		}
		if i == 0 {
			head, seq, genesis = v.Head.Hash, v.Head.Seq, v.Genesis.Hash
		} else if v.Head.Seq != seq || v.Head.Hash != head || v.Genesis.Hash != genesis {
			return false
		}
	}
	return true
}

// clusterState describes every device for a liveness report.
func (w *world) clusterState() string {
	var b strings.Builder
	for _, d := range w.devs {
		n, inc := d.node()
		if n == nil {
			fmt.Fprintf(&b, "\n    dev%d: down", d.idx)
			continue
		}
		st := n.State()
		fmt.Fprintf(&b, "\n    dev%d (inc %d): raft %s term %d leader dev%d applied %d; lease %s (held by me %v); head %d; pending %d; loop: accepted %d rejected %d propose errors %d, last error %q",
			d.idx, inc, st.Raft.Role, st.Raft.Term, w.devOf(st.Raft.Leader), st.Raft.AppliedIndex,
			fmtLease(n.Log().View().Lease, w), st.Lease.HeldByMe, st.Head.Seq, st.Pending,
			st.Loop.CommitsAccepted, st.Loop.CommitsRejected, st.Loop.ProposeErrors, st.Loop.LastError)
	}
	return b.String()
}
