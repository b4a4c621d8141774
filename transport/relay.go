package transport

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
)

// Relaying through members (circuit relay v2). Every member serves as a relay for
// members: a device that others cannot dial (behind a NAT) keeps a reservation on
// every member it reaches directly and publishes /p2p-circuit addresses through
// them, so the others reach it through any of them; DCUtR (hole punching) then
// tries to replace a relayed connection by a direct one. Relayed connections carry
// the private-network handshake end to end (the relay sees ciphertext).

// memberRelayResources are the relay's limits: no per-connection limit (a Raft
// snapshot or catch-up must not be cut at libp2p's default 128 KiB / 2 min), room for
// every member's reservation, several members behind one NAT (one IP).
func memberRelayResources() relay.Resources {
	rc := relay.DefaultResources()
	rc.Limit = nil
	rc.MaxReservations = 256
	rc.MaxCircuits = 64
	rc.BufferSize = 64 << 10
	rc.MaxReservationsPerIP = 256
	rc.MaxReservationsPerASN = 256
	return rc
}

// memberACL admits reservations from members only, and relays a connection only
// to a member: from a member, or from a device that is not one to a member whose
// join window is open (it told this relay so: relaywindow.go). The destination's
// gater then decides, as for a direct connection.
type memberACL struct{ g *gater }

func (a memberACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool { return a.g.isMember(p) }
func (a memberACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dest peer.ID) bool {
	return a.g.isMember(dest) && !a.g.isBlocked(src) &&
		(a.g.isMember(src) || a.g.relayWins.openFor(dest, a.g.now()))
}

// startRelay runs the member relay service on h.
func (h *Host) startRelay() error {
	r, err := relay.New(h.h, relay.WithResources(memberRelayResources()), relay.WithInfiniteLimits(),
		relay.WithACL(memberACL{h.gater}))
	if err != nil {
		return err
	}
	h.relaySvc = r
	return nil
}

// reservations are this device's reservations on relay members.
type reservations struct {
	mu  sync.Mutex
	exp map[peer.ID]time.Time // relay -> expiry
}

// forgetReservation drops the reservation on relay r when a direct connection to it
// closes: the relay forgets a reservation with the connection that made it (and all
// of them when it restarts), so the next round of reserveLoop reserves again. Without
// this a relay member that restarted within one round kept being counted as holding
// this device's reservation (until its hour ran out), and the others' circuits to
// this device through it were refused (NO_RESERVATION).
func (h *Host) forgetReservation(r peer.ID, c network.Conn) {
	if _, relayed := relayOf(c.RemoteMultiaddr()); relayed || c.Stat().Limited {
		return
	}
	h.resv.mu.Lock()
	delete(h.resv.exp, r)
	h.resv.mu.Unlock()
}

// reserveInterval is how often reservations are checked (and renewed ahead of expiry).
const reserveInterval = 5 * time.Second

// reserveLoop keeps a reservation on every member reached directly, renews it ahead
// of its expiry, and drops the ones on members no longer reached directly.
func (h *Host) reserveLoop() {
	defer h.wg.Done()
	t := time.NewTicker(reserveInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		book := h.book.all()
		for p := range book {
			path, _ := h.pathTo(p)
			h.resv.mu.Lock()
			exp, ok := h.resv.exp[p]
			if path != PathDirect {
				delete(h.resv.exp, p)
			}
			h.resv.mu.Unlock()
			if path != PathDirect || (ok && time.Until(exp) > 10*time.Minute) {
				continue
			}
			ctx, cancel := context.WithTimeout(h.ctx, h.cfg.DialTimeout)
			rsvp, err := client.Reserve(ctx, h.h, peer.AddrInfo{ID: p})
			cancel()
			h.resv.mu.Lock()
			if err != nil {
				delete(h.resv.exp, p)
				h.log.Debug("relay reservation failed", "relay", p, "err", err)
			} else {
				if h.resv.exp == nil {
					h.resv.exp = map[peer.ID]time.Time{}
				}
				if !ok {
					h.log.Info("relay reservation", "relay", p, "expires", rsvp.Expiration)
				}
				h.resv.exp[p] = rsvp.Expiration
			}
			h.resv.mu.Unlock()
		}
		for p := range h.relaysHeld() {
			if _, ok := book[p]; !ok {
				h.resv.mu.Lock()
				delete(h.resv.exp, p)
				h.resv.mu.Unlock()
			}
		}
		h.circuits.Store(h.circuitAddrs(book))
	}
}

func (h *Host) relaysHeld() map[peer.ID]time.Time {
	h.resv.mu.Lock()
	defer h.resv.mu.Unlock()
	out := make(map[peer.ID]time.Time, len(h.resv.exp))
	now := time.Now()
	for p, e := range h.resv.exp {
		if e.After(now) {
			out[p] = e
		}
	}
	return out
}

// Relays returns the members this device holds a relay reservation on.
func (h *Host) Relays() []peer.ID {
	var out []peer.ID
	for p := range h.relaysHeld() {
		out = append(out, p)
	}
	return out
}

// circuitAddrs are this device's addresses through its relays: each relay's direct
// addresses (from the book) followed by /p2p/<relay>/p2p-circuit.
func (h *Host) circuitAddrs(book map[peer.ID][]ma.Multiaddr) *[]ma.Multiaddr {
	var out []ma.Multiaddr
	for r := range h.relaysHeld() {
		via, err := ma.NewMultiaddr("/p2p/" + r.String() + "/p2p-circuit")
		if err != nil {
			continue
		}
		for _, a := range book[r] {
			if _, ok := relayOf(a); ok {
				continue
			}
			out = append(out, a.Encapsulate(via))
		}
	}
	return &out
}

// viaRelays returns /p2p/<relay>/p2p-circuit addresses for reaching p through every
// member this device is directly connected to (p's reservation there decides).
func (h *Host) viaRelays(p peer.ID) []ma.Multiaddr {
	var out []ma.Multiaddr
	for r := range h.book.all() {
		if r == p || r == h.h.ID() {
			continue
		}
		if path, _ := h.pathTo(r); path != PathDirect {
			continue
		}
		if a, err := ma.NewMultiaddr("/p2p/" + r.String() + "/p2p-circuit"); err == nil {
			out = append(out, a)
		}
	}
	return out
}
