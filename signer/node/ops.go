package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/intentlog"
)

// opsState is what the node keeps for operators beyond the core: when it started,
// whether it learned that it is no longer a member, and the takeover histogram.
type opsState struct {
	started time.Time

	removed     chan struct{}
	removedOnce sync.Once
	leaving     atomic.Bool // a Leave is in progress: the configuration may show it first
	removedHow  atomic.Pointer[string]
	removedAt   atomic.Pointer[time.Time]

	takeover *prometheus.HistogramVec
}

func newOpsState() *opsState {
	o := &opsState{started: time.Now(), removed: make(chan struct{}),
		takeover: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_lease_takeover_seconds",
			Help: "Time a change of holder took, as applied on this device: for a claim or steal, from the previous holder's last lease write (its last renewal, or its release); for a transfer, from the holder's request.",
			// From a graceful handover (milliseconds) to a failover after a crash
			// (about one TTL, 15 s by default, or two with skewed clocks).
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 20, 30, 45, 60, 120},
		}, []string{"event"})}
	for _, e := range []string{"claim", "steal", "transfer"} {
		o.takeover.WithLabelValues(e) // every series exists from the start (dashboards, alerts)
	}
	return o
}

// Removed returns a channel closed once this device learns that it is no longer a
// member of its cluster: its own Leave succeeded, the Raft configuration, which
// named it earlier in this process, no longer does, or a member told it that it was
// removed while it was down (transport.RemovedProtocol). A removed device gets no more
// entries; stop it (the baton binary exits). RemovedHow says which.
func (n *Node) Removed() <-chan struct{} { return n.ops.removed }

// RemovedHow returns "left" or "removed" and when, once Removed is closed.
func (n *Node) RemovedHow() (how string, at time.Time, ok bool) {
	h, t := n.ops.removedHow.Load(), n.ops.removedAt.Load()
	if h == nil || t == nil {
		return "", time.Time{}, false
	}
	return *h, *t, true
}

// leftAnyway reports, after a Leave that returned an error, whether the removal was
// applied all the same: the answer can be lost when the leader shuts the removed
// device out at once, while this device's configuration already shows the removal.
func (n *Node) leftAnyway() bool {
	ms, err := n.cluster.Members()
	if err != nil || len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if m.ID.String() == n.id {
			return false
		}
	}
	return true
}

func (n *Node) noteRemoved(how string) {
	n.ops.removedOnce.Do(func() {
		now := time.Now()
		n.ops.removedHow.Store(&how)
		n.ops.removedAt.Store(&now)
		close(n.ops.removed)
		n.logger.Info("this device is no longer a member of the cluster", "how", how)
	})
}

// takeoverTime is how long a change of holder took, as applied on this device at now
// (lastAt: when the previous lease write applied here): a claim or a steal, from the
// previous holder's last write (a renewal, or its release) to the new holder's write,
// the time no device could sign; a transfer, in which the holder hands the lease over
// in one write, from the holder's request (the write's timestamp, its clock) to its
// apply here, at least 0. Measured from the last renewal, a transfer counted up to half
// a TTL it never took (issue 39 item 9: 1.15 s mean while watch showed 13-100 ms).
func takeoverTime(last intentlog.Lease, lastAt time.Time, lc intentlog.LeaseChanged, now time.Time) (time.Duration, bool) {
	if lc.Lease.Holder == last.Holder {
		return 0, false
	}
	switch lc.Event {
	case "claim", "steal":
		return now.Sub(lastAt), true
	case "transfer":
		return max(0, now.Sub(time.UnixMilli(lc.Lease.TS))), true
	}
	return 0, false
}

// opsLoop watches the membership (for Removed) and feeds the takeover histogram from
// applied lease changes, until the node stops.
func (n *Node) opsLoop() {
	sub := n.log.Subscribe()
	defer sub.Close()
	seenSelf := false
	check := func() {
		if n.cluster == nil {
			return
		}
		if _, _, told := n.cluster.RemovedNotice(); told {
			// Removed while it was down: a member said so (transport.RemovedProtocol).
			n.noteRemoved("removed")
			return
		}
		ms, err := n.cluster.Members()
		if err != nil || len(ms) == 0 {
			return
		}
		for _, m := range ms {
			if m.ID.String() == n.id {
				seenSelf = true
				return
			}
		}
		if seenSelf && !n.ops.leaving.Load() {
			n.noteRemoved("removed")
		}
	}
	check()
	hb, _ := n.raftTimeouts()
	tick := time.NewTicker(max(hb, 100*time.Millisecond))
	defer tick.Stop()
	last := n.log.View().Lease
	lastAt := time.Now()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
			check()
		case ev, ok := <-sub.C:
			if !ok {
				return
			}
			lc, isLease := ev.(intentlog.LeaseChanged)
			if !isLease {
				if _, restored := ev.(intentlog.StateRestored); restored {
					last, lastAt = n.log.View().Lease, time.Now()
				}
				continue
			}
			now := time.Now()
			if d, ok := takeoverTime(last, lastAt, lc, now); ok {
				n.ops.takeover.WithLabelValues(lc.Event).Observe(d.Seconds())
			}
			last, lastAt = lc.Lease, now
		}
	}
}
