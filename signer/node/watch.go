package node

import (
	"context"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
)

// LeaseChange is one line of WatchLease (and of GET /v1/lease/watch).
type LeaseChange struct {
	// Event: "current" (the lease when the watch starts), "claim", "renew", "release",
	// "transfer", "steal" (applied lease entries), "lost" (this device's hold ended),
	// "lapsed" (the holder's lease lapsed as this device sees it: no renewal for a
	// TTL), "resync" (events were missed; this is the lease now).
	Event  string `json:"event"`
	Index  uint64 `json:"index,omitempty"` // Raft index of an applied entry
	Holder string `json:"holder"`          // after the event ("" when free)
	Prior  string `json:"prior,omitempty"` // the holder before, when it changed
	Epoch  uint64 `json:"epoch"`
	TS     int64  `json:"ts,omitempty"` // the record's ts (unix ms)
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	// HeldByMe and ExpiresInMs are this device's view right after the event (see
	// LeaseState).
	HeldByMe    bool      `json:"held_by_me"`
	ExpiresInMs int64     `json:"expires_in_ms"`
	At          time.Time `json:"at"` // when this device saw it
}

// WatchLease delivers every lease change as this device applies it, starting with
// the current lease, until ctx ends or the node stops (then the channel closes).
// Renewals are delivered only with renewals. A slow reader does not block the node:
// when events were dropped a "resync" line gives the lease as it is now.
func (n *Node) WatchLease(ctx context.Context, renewals bool) <-chan LeaseChange {
	ch := make(chan LeaseChange, 16)
	sub := n.log.Subscribe()
	go func() {
		defer close(ch)
		defer sub.Close()
		send := func(c LeaseChange) bool {
			c.At = time.Now()
			d := n.lease.Decide()
			c.HeldByMe = n.Holds()
			if c.Holder != "" {
				c.ExpiresInMs = d.ExpiresIn().Milliseconds()
			}
			select {
			case ch <- c:
				return true
			case <-ctx.Done():
			case <-n.ctx.Done():
			}
			return false
		}
		of := func(event string, l intentlog.Lease) LeaseChange {
			return LeaseChange{Event: event, Holder: l.Holder, Epoch: l.Epoch, TS: l.TS, TTLMs: l.TTL}
		}
		cur := n.log.View().Lease
		lostSeen := sub.Lost()
		var lost <-chan struct{} // this device's hold, while it holds
		if cur.Holder == n.id && n.Holds() {
			lost = n.Lost()
		}
		if !send(of("current", cur)) {
			return
		}
		var lapse *time.Timer
		var lapseC <-chan time.Time
		lapsedRev := uint64(0)
		recheck := max(n.cfg.Tick/4, 10*time.Millisecond)
		hold := time.NewTimer(recheck)
		defer hold.Stop()
		arm := func() {
			if lapse != nil {
				lapse.Stop()
				lapse, lapseC = nil, nil
			}
			if cur.Holder == "" || cur.Holder == n.id || cur.Rev == lapsedRev {
				return
			}
			if d := n.lease.Decide(); d.ExpiresIn() > 0 {
				lapse = time.NewTimer(d.ExpiresIn() + time.Millisecond)
			} else {
				lapse = time.NewTimer(recheck)
			}
			lapseC = lapse.C
		}
		arm()
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.ctx.Done():
				return
			case ev, ok := <-sub.C:
				if !ok {
					return
				}
				if l := sub.Lost(); l != lostSeen {
					lostSeen = l
					cur = n.log.View().Lease
					if !send(of("resync", cur)) {
						return
					}
					arm()
					continue
				}
				switch e := ev.(type) {
				case intentlog.StateRestored:
					cur = n.log.View().Lease
					if !send(of("resync", cur)) {
						return
					}
				case intentlog.LeaseChanged:
					prior := cur.Holder
					cur = e.Lease
					if e.Event == "renew" && !renewals {
						arm()
						continue
					}
					c := of(e.Event, e.Lease)
					c.Index = e.Index
					if prior != e.Lease.Holder {
						c.Prior = prior
					}
					if !send(c) {
						return
					}
				default:
					continue
				}
				arm()
			case <-hold.C:
				// Start watching this device's hold once it holds (the claim is applied
				// before the loop counts it as held).
				if lost == nil && cur.Holder == n.id && n.Holds() {
					lost = n.Lost()
				}
				hold.Reset(recheck)
			case <-lost:
				lost = nil
				c := of("lost", n.log.View().Lease)
				if !send(c) {
					return
				}
			case <-lapseC:
				lapse, lapseC = nil, nil
				if d := n.lease.Decide(); d.Action == election.Claim && cur.Holder != "" && cur.Holder != n.id {
					lapsedRev = cur.Rev
					c := of("lapsed", cur)
					c.Prior = cur.Holder
					if !send(c) {
						return
					}
				} else {
					arm()
				}
			}
		}
	}()
	return ch
}
