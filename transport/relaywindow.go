package transport

import (
	"context"
	"encoding/binary"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	manetpkg "github.com/multiformats/go-multiaddr/net"
)

// Joining through a relay. A device invited by a member behind a NAT reaches that
// member only through a relay member, whose gater admits members only. So a member
// that opens a join window tells the members it reaches directly (its relays) until
// when: each of them then admits devices that are not members (they proved the
// network key, as for a join window of its own) and relays them to that member only,
// until then. The inviting member's own gater and token check decide the rest.

// RelayWindowProtocol carries a member's join window to its relays: 8 bytes, the
// window's end in Unix milliseconds (0: closed), answered by one byte.
const RelayWindowProtocol protocol.ID = "/baton/relay-window/1.0.0"

// maxRelayWindow bounds how long a relay keeps a member's window open whatever the
// member asks (the API allows join windows of a week).
const maxRelayWindow = 7 * 24 * time.Hour

// relayWindows: members' join windows this device relays to (member -> end).
type relayWindows struct {
	mu  sync.Mutex
	end map[peer.ID]time.Time
}

func (w *relayWindows) set(p peer.ID, until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if until.IsZero() {
		delete(w.end, p)
		return
	}
	if w.end == nil {
		w.end = map[peer.ID]time.Time{}
	}
	w.end[p] = until
}

// openFor reports whether member p's window is open at now.
func (w *relayWindows) openFor(p peer.ID, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.end[p])
}

// anyOpen reports whether some member's window is open at now.
func (w *relayWindows) anyOpen(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, e := range w.end {
		if now.Before(e) {
			return true
		}
		delete(w.end, p)
	}
	return false
}

// handleRelayWindow records a member's join window (members only).
func (h *Host) handleRelayWindow(s network.Stream) {
	defer s.Close()
	p := s.Conn().RemotePeer()
	if !h.gater.isMember(p) {
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(h.cfg.DialTimeout))
	var b [8]byte
	if _, err := io.ReadFull(s, b[:]); err != nil {
		_ = s.Reset()
		return
	}
	var until time.Time
	if ms := int64(binary.BigEndian.Uint64(b[:])); ms > 0 {
		until = time.UnixMilli(ms)
		if limit := h.cfg.Now().Add(maxRelayWindow); until.After(limit) {
			until = limit
		}
	}
	h.gater.relayWins.set(p, until)
	h.log.Info("relaying devices that are not members to a member's join window", "member", p, "until", until)
	_, _ = s.Write([]byte{1})
}

// announceJoinWindow tells every member this device reaches directly that its join
// window ends at until (zero: closed), concurrently, within the dial timeout. A
// member that does not hear it simply does not relay joiners to this device.
func (h *Host) announceJoinWindow(until time.Time) {
	var ms uint64
	if !until.IsZero() {
		ms = uint64(until.UnixMilli())
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ms)
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.DialTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for r := range h.book.all() {
		if path, _ := h.pathTo(r); path != PathDirect {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := h.h.NewStream(network.WithNoDial(ctx, "relay window"), r, RelayWindowProtocol)
			if err != nil {
				h.log.Debug("relay window not announced", "relay", r, "err", err)
				return
			}
			defer s.Close()
			_ = s.SetDeadline(time.Now().Add(h.cfg.DialTimeout))
			var ack [1]byte
			if _, err := s.Write(b[:]); err == nil {
				_, _ = io.ReadFull(s, ack[:])
			}
		}()
	}
	wg.Wait()
}

// InviteAddrs are the addresses an invite from this device carries: its published
// ones (P2PAddrs: direct, and through the relays it holds a reservation on) and
// through every member it reaches directly that has a public address, the way in to
// a device behind a NAT (its reservation there may still be on its way: the joiner
// retries until it is; a device others can dial is reached directly first).
func (h *Host) InviteAddrs() []ma.Multiaddr {
	out := h.P2PAddrs()
	seen := map[string]bool{}
	for _, a := range out {
		seen[a.String()] = true
	}
	me, err := ma.NewMultiaddr("/p2p/" + h.h.ID().String())
	if err != nil {
		return out
	}
	for r, addrs := range h.book.all() {
		if path, _ := h.pathTo(r); path != PathDirect {
			continue
		}
		via, err := ma.NewMultiaddr("/p2p/" + r.String() + "/p2p-circuit")
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if _, relayed := relayOf(a); relayed || !manetpkg.IsPublicAddr(a) {
				continue
			}
			c := a.Encapsulate(via).Encapsulate(me)
			if !seen[c.String()] {
				seen[c.String()] = true
				out = append(out, c)
			}
		}
	}
	return out
}
