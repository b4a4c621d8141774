package transport

import (
	"crypto/subtle"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// gater admits inbound connections only from current members, peers explicitly
// allowed (the members a joining device was given) and, while a join window is open,
// any peer that completed the private-network handshake (such peers are served only
// the join protocol). Blocked peers are refused both ways (fault injection).
type gater struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.RWMutex
	members map[peer.ID]bool
	allowed map[peer.ID]bool
	blocked map[peer.ID]bool
	// wins are the open join windows, one per invite (a later invite leaves the
	// earlier ones open; one with the same token replaces it). A window admits
	// uses devices. A join in progress holds a use (claims); a successful one spends
	// it (joined). A device that joined may repeat its join requests until the window
	// expires (a retry after a lost answer); others are refused once every use is
	// spent or held.
	wins    []*joinWindow
	joinGen uint64      // numbers the windows (joinWindow.gen)
	tombs   *tombstones // removed members, admitted to be told so (removed_members.go)
	// relayWins: members' join windows this device relays joiners to (relaywindow.go).
	relayWins relayWindows
}

// joinWindow is one invite's join window.
type joinWindow struct {
	token  []byte
	until  time.Time
	uses   int
	claims map[peer.ID]int // joins in progress per device (a retry may overlap)
	joined map[peer.ID]bool
	gen    uint64
}

// openFor: the window is open for p's join: not expired, and p joined through it,
// holds one of its uses, or a use is left (neither spent nor held by a join in
// progress).
func (w *joinWindow) openFor(p peer.ID, now time.Time) bool {
	return now.Before(w.until) && (w.joined[p] || w.claims[p] > 0 || w.uses > len(w.claims))
}

var _ connmgr.ConnectionGater = (*gater)(nil)

func newGater(log *slog.Logger, now func() time.Time) *gater {
	return &gater{
		log:     log,
		now:     now,
		members: map[peer.ID]bool{},
		allowed: map[peer.ID]bool{},
		blocked: map[peer.ID]bool{},
	}
}

// isMember reports whether p may use the member protocols (Raft, forwarding).
func (g *gater) isMember(p peer.ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return (g.members[p] || g.allowed[p]) && !g.blocked[p]
}

func (g *gater) setMember(p peer.ID, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Either way p is no longer merely "allowed": it became a member, or it left.
	delete(g.allowed, p)
	if ok {
		g.members[p] = true
	} else {
		delete(g.members, p)
	}
}

func (g *gater) memberSet() map[peer.ID]bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make(map[peer.ID]bool, len(g.members))
	for p := range g.members {
		out[p] = true
	}
	return out
}

func (g *gater) allow(p peer.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allowed[p] = true
}

func (g *gater) setBlocked(ps []peer.ID, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range ps {
		if ok {
			g.blocked[p] = true
		} else {
			delete(g.blocked, p)
		}
	}
}

func (g *gater) unblockAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.blocked)
}

func (g *gater) isBlocked(p peer.ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.blocked[p]
}

// openJoin opens a join window for uses devices (at least one) beside the windows
// already open; a window with the same token is replaced. Expired windows go.
func (g *gater) openJoin(token []byte, until time.Time, uses int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.wins = slices.DeleteFunc(g.wins, func(w *joinWindow) bool {
		return !now.Before(w.until) || subtle.ConstantTimeCompare(w.token, token) == 1
	})
	g.joinGen++
	g.wins = append(g.wins, &joinWindow{token: append([]byte(nil), token...), until: until, uses: max(uses, 1),
		claims: map[peer.ID]int{}, joined: map[peer.ID]bool{}, gen: g.joinGen})
}

// closeJoin closes every join window.
func (g *gater) closeJoin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wins = nil
}

// joinUntil returns when the last open window expires (zero when none is open).
func (g *gater) joinUntil() time.Time {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var until time.Time
	for _, w := range g.wins {
		until = maxTime(until, w.until)
	}
	if !g.now().Before(until) {
		return time.Time{}
	}
	return until
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// joinOpen reports whether a join window is open now (not expired), whether or not
// its uses are spent: the gater admits a device with the network key until the
// window expires, so that one arriving with a spent invite hears ErrBadToken from
// the join protocol rather than a bare refused connection.
func (g *gater) joinOpen() bool { return !g.joinUntil().IsZero() }

// windowLocked returns the open window whose token is token (nil: none).
func (g *gater) windowLocked(token []byte) *joinWindow {
	now := g.now()
	for _, w := range g.wins {
		if now.Before(w.until) && subtle.ConstantTimeCompare(token, w.token) == 1 {
			return w
		}
	}
	return nil
}

// checkToken reports whether p may use the join protocol with token: it is an open
// window's token and p joined through that window, holds one of its uses, or a use
// is left.
func (g *gater) checkToken(token []byte, p peer.ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	w := g.windowLocked(token)
	return w != nil && w.openFor(p, g.now())
}

// refusal says why checkToken refuses token for p, for the joining device.
func (g *gater) refusal(token []byte, p peer.ID) string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	w := g.windowLocked(token)
	switch {
	case w == nil && len(g.wins) == 0:
		return "no invite is open on this device (it expired, or this device restarted or made none)"
	case w == nil:
		return "this device has no open invite with that token (it expired, or this device restarted since it made it)"
	case w.openFor(p, g.now()):
		return ""
	case w.uses <= 0:
		return "the invite was already used by another device (an invite admits one device: make one per device with `baton invite`)"
	default:
		return "another device is joining with this invite right now (an invite admits one device)"
	}
}

// claimJoin holds one of the window's uses for p's join (checkToken's rule) and
// returns the window's generation, for endJoin.
func (g *gater) claimJoin(token []byte, p peer.ID) (gen uint64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.windowLocked(token)
	if w == nil || !w.openFor(p, g.now()) {
		return 0, false
	}
	if !w.joined[p] {
		w.claims[p]++
	}
	return w.gen, true
}

// endJoin releases p's claim; a successful join spends the use. A window replaced
// or closed meanwhile is left alone.
func (g *gater) endJoin(gen uint64, p peer.ID, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.IndexFunc(g.wins, func(w *joinWindow) bool { return w.gen == gen })
	if i < 0 {
		return
	}
	w := g.wins[i]
	if ok {
		if !w.joined[p] {
			w.uses--
			w.joined[p] = true
		}
		delete(w.claims, p)
		return
	}
	if w.claims[p] > 1 {
		w.claims[p]--
	} else {
		delete(w.claims, p)
	}
}

func (g *gater) InterceptPeerDial(p peer.ID) bool {
	if g.isBlocked(p) {
		g.log.Debug("gater: refusing dial to blocked peer", "peer", p)
		return false
	}
	return true
}

func (g *gater) InterceptAddrDial(peer.ID, ma.Multiaddr) bool { return true }

// InterceptAccept admits every inbound TCP connection: the peer is not known before
// the (private-network protected) handshake; InterceptSecured decides.
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

func (g *gater) InterceptSecured(dir network.Direction, p peer.ID, addrs network.ConnMultiaddrs) bool {
	if g.isBlocked(p) {
		g.log.Debug("gater: refused blocked peer", "peer", p, "dir", dir.String())
		return false
	}
	if dir == network.DirOutbound {
		return true // we chose to dial it
	}
	if g.isMember(p) {
		return true
	}
	if g.admitRemoved(p) {
		g.log.Info("gater: admitted a removed member (to tell it so)", "peer", p)
		return true
	}
	if g.joinOpen() {
		g.log.Info("gater: admitted non-member during join window", "peer", p, "remote", addrs.RemoteMultiaddr())
		return true
	}
	if g.relayWins.anyOpen(g.now()) {
		// Served like a joiner; the relay's ACL takes it only to the member whose
		// window is open (memberACL).
		g.log.Info("gater: admitted non-member during a member's join window (to relay it there)", "peer", p, "remote", addrs.RemoteMultiaddr())
		return true
	}
	g.log.Warn("gater: refused connection from non-member", "peer", p, "remote", addrs.RemoteMultiaddr())
	return false
}

func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
