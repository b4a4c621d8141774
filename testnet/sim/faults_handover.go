package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/raft"
)

// Faults of issue 19.6: handovers asked of a device that does not hold the lease
// (forwarded to the holder: node.HolderRelease, node.HolderTransfer) and Raft
// leadership changes while the holder has commits in flight.
const (
	FFwdRelease     = "fwdrelease"     // a non-holder asks the holder to release (forwarded)
	FFwdTransfer    = "fwdtransfer"    // a non-holder asks the holder to transfer to a member (forwarded)
	FLeaderInFlight = "leaderinflight" // a Raft leadership transfer while the holder has commits in flight
	// FLeaderCut: while a holder that does not lead Raft has a commit in flight, the
	// leader stops hearing Raft answers (it still sends, and forwards still reach it)
	// and the holder's own Raft traffic lags; the leader steps down with the commit
	// replicated but not committed, a follower that has it is elected and commits
	// it, and the holder sends it again to the new leader, which refuses the second
	// copy (bad_prev), an answer that can reach the holder before its replica applied
	// the first (issue 19.5).
	FLeaderCut = "leadercut"
)

// The mixed profile's fault mix includes them; added here so that the profile's
// literal (shared with other fault kinds) stays as it is.
func init() {
	p := profiles["mixed"]
	p.Weights[FFwdRelease] = 1
	p.Weights[FFwdTransfer] = 1
	p.Weights[FLeaderInFlight] = 2
	p.OddClients = 1
	profiles["mixed"] = p
	c := profiles["calm"]
	c.OddClients = 1
	profiles["calm"] = c
	// inputs: odd clients and the handover faults, with ordinary load.
	profiles["inputs"] = Profile{Name: "inputs", FaultEvery: time.Second,
		Weights: map[string]int{FFwdRelease: 2, FFwdTransfer: 2, FLeaderInFlight: 3, FLeadership: 1, FRelease: 1, FTransfer: 1},
		Clients: 3, Think: 40 * time.Millisecond, OddClients: 2,
		Timeout: [2]time.Duration{500 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
	// leaders: leader changes while the holder has commits in flight (a leader cut
	// off from Raft answers, leadership transfers), with a holder that does not lead
	// and lags; its own profile so that the inputs profile's seeds keep their
	// schedules.
	profiles["leaders"] = Profile{Name: "leaders", FaultEvery: time.Second,
		Weights: map[string]int{FLeaderCut: 3, FLeaderInFlight: 2, FFwdRelease: 1, FFwdTransfer: 1, FLeadership: 1},
		Clients: 4, Think: 30 * time.Millisecond, OddClients: 1,
		Timeout: [2]time.Duration{500 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
}

// injectHandover runs the faults above; handled is false for any other kind.
func (w *world) injectHandover(a action, rng *rand.Rand) (ok bool, detail string, handled bool) {
	switch a.Kind {
	case FFwdRelease, FFwdTransfer:
		holder := w.holderDev()
		if holder < 0 {
			return false, "", true
		}
		by := w.pickDev(rng, func(i int) bool {
			n, _ := w.devs[i].node()
			return i != holder && n != nil && !w.devs[i].paused() && !w.devs[i].isRemoved()
		})
		if by < 0 {
			return false, "", true
		}
		n, _ := w.devs[by].node()
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
		defer cancel()
		if a.Kind == FFwdRelease {
			err := n.HolderRelease(ctx)
			return true, fmt.Sprintf("release asked by dev%d of holder dev%d: %v", by, holder, errText(err)), true
		}
		to := w.pickDev(rng, func(i int) bool { return i != holder && !w.devs[i].isRemoved() })
		if to < 0 {
			return false, "", true
		}
		err := n.HolderTransfer(ctx, w.ids[to])
		return true, fmt.Sprintf("transfer asked by dev%d of holder dev%d -> dev%d: %v", by, holder, to, errText(err)), true

	case FLeaderCut:
		return w.leaderCut(a, rng), "", true

	case FLeaderInFlight:
		// Wait (bounded) for the holder to have a commit in flight, then move Raft's
		// leadership away from whoever leads.
		deadline := time.Now().Add(w.cfg.TTL)
		for time.Now().Before(deadline) {
			h := w.holderDev()
			if h >= 0 {
				if n, _ := w.devs[h].node(); n != nil && n.State().Loop.InFlight > 0 {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		l := w.leaderDev()
		if l < 0 {
			return false, "", true
		}
		n, _ := w.devs[l].node()
		if n == nil {
			return false, "", true
		}
		inflight := 0
		if h := w.holderDev(); h >= 0 {
			if hn, _ := w.devs[h].node(); hn != nil {
				inflight = hn.State().Loop.InFlight
			}
		}
		// Half the time the holder's replica lags behind the new leader: Raft traffic
		// into it is held up for a while, forwards are not, so the answer to a
		// commit it sends again after the leader change (the copy the new leader
		// refuses, the first having applied) can arrive before its own replica
		// applied the first copy (issue 19.5: no false divergence alarm).
		lag := time.Duration(0)
		if h := w.holderDev(); h >= 0 && rng.IntN(2) == 0 {
			lag = time.Duration(20+rng.IntN(180)) * time.Millisecond
			var links [][2]int
			for o := range w.cfg.Devices {
				if o != h {
					links = append(links, [2]int{o, h})
				}
			}
			w.mu.Lock()
			w.linkFs[a.ID] = linkFault{links: links, f: linkFaults{RaftDelay: lag}}
			w.mu.Unlock()
			w.applyLinks()
			defer func() {
				time.Sleep(w.cfg.TTL / 2)
				w.mu.Lock()
				delete(w.linkFs, a.ID)
				w.mu.Unlock()
				w.applyLinks()
			}()
		}
		// Half the time leadership goes to a device that holds no lease (the holder
		// then forwards its commits, and sends again the ones in flight); otherwise
		// to whichever follower Raft picks.
		var f interface{ Error() error }
		if h := w.holderDev(); lag > 0 && h >= 0 {
			to := w.pickDev(rng, func(i int) bool {
				dn, _ := w.devs[i].node()
				return i != h && i != l && dn != nil && !w.devs[i].paused() && !w.devs[i].isRemoved()
			})
			if to >= 0 {
				f = n.Log().Raft().LeadershipTransferToServer(raft.ServerID(w.ids[to]), raft.ServerAddress(w.ids[to]))
			}
		}
		if f == nil {
			f = n.Log().Raft().LeadershipTransfer()
		}
		err := f.Error()
		return true, fmt.Sprintf("leadership transfer from dev%d with %d commits in flight (holder's Raft traffic held %v): %v",
			l, inflight, lag, errText(err)), true
	}
	return false, "", false
}

// leaderCut runs FLeaderCut; ok reports whether it found a holder that does not
// lead with a commit in flight (within a TTL).
func (w *world) leaderCut(a action, rng *rand.Rand) (ok bool) {
	// Half the time the holder leads Raft and has two commits in flight (it signs the
	// second once Raft has queued the first): cut off from Raft answers, it steps
	// down with both replicated, a follower commits both, and the holder, whose
	// replica hears nothing, sends the first again to the new leader, which refuses it
	// with its head past it (the order of issue 19.5's false alarm).
	leading := rng.IntN(2) == 0
	need := 1
	if leading {
		need = 2
	}
	deadline := time.Now().Add(w.cfg.TTL)
	h, l := -1, -1
	for time.Now().Before(deadline) {
		h, l = w.holderDev(), w.leaderDev()
		if h >= 0 && l >= 0 && (h == l) == leading {
			if n, _ := w.devs[h].node(); n != nil && n.State().Loop.InFlight >= need {
				break
			}
		}
		h = -1
		time.Sleep(time.Millisecond)
	}
	if h < 0 {
		return false
	}
	var into, intoHolder [][2]int
	for o := range w.cfg.Devices {
		if o != l {
			into = append(into, [2]int{o, l})
		}
		if o != h {
			intoHolder = append(intoHolder, [2]int{o, h})
		}
	}
	lag := time.Duration(20+rng.IntN(180)) * time.Millisecond
	w.mu.Lock()
	w.linkFs[a.ID] = linkFault{links: into, f: linkFaults{RaftCut: true}}
	if !leading {
		w.linkFs[-a.ID] = linkFault{links: intoHolder, f: linkFaults{RaftDelay: lag}}
	}
	w.mu.Unlock()
	w.applyLinks()
	if leading {
		w.ev.add(l, "result", "#%d leader and holder dev%d hears no Raft answers (commits in flight)", a.ID, l)
	} else {
		w.ev.add(l, "result", "#%d leader dev%d hears no Raft answers; holder dev%d's Raft traffic held %v", a.ID, l, h, lag)
	}
	time.Sleep(w.cfg.TTL + time.Duration(rng.IntN(int(w.cfg.TTL/time.Millisecond)))*time.Millisecond)
	w.mu.Lock()
	delete(w.linkFs, a.ID)
	delete(w.linkFs, -a.ID)
	w.mu.Unlock()
	w.applyLinks()
	return true
}
