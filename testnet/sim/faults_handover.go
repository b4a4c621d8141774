package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Faults of issue 19.6: handovers asked of a device that does not hold the lease
// (forwarded to the holder: node.HolderRelease, node.HolderTransfer) and Raft
// leadership changes while the holder has commits in flight.
const (
	FFwdRelease     = "fwdrelease"     // a non-holder asks the holder to release (forwarded)
	FFwdTransfer    = "fwdtransfer"    // a non-holder asks the holder to transfer to a member (forwarded)
	FLeaderInFlight = "leaderinflight" // a Raft leadership transfer while the holder has commits in flight
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
		err := n.Log().Raft().LeadershipTransfer().Error()
		return true, fmt.Sprintf("leadership transfer from dev%d with %d commits in flight: %v", l, inflight, errText(err)), true
	}
	return false, "", false
}
