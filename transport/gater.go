package transport

import (
	"crypto/subtle"
	"log/slog"
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

	mu        sync.RWMutex
	members   map[peer.ID]bool
	allowed   map[peer.ID]bool
	blocked   map[peer.ID]bool
	joinToken []byte
	joinUntil time.Time
	// A window admits joinUses devices. A join in progress holds a use (claims);
	// a successful one spends it (joined). A device that joined may repeat its join
	// requests until the window expires (a retry after a lost answer); others are
	// refused once every use is spent or held.
	joinUses int
	claims   map[peer.ID]int // joins in progress per device (a retry may overlap)
	joined   map[peer.ID]bool
	joinGen  uint64      // incremented by openJoin and closeJoin
	tombs    *tombstones // removed members, admitted to be told so (removed_members.go)
	// relayWins: members' join windows this device relays joiners to (relaywindow.go).
	relayWins relayWindows
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

// openJoin opens a join window for uses devices (at least one), replacing any
// earlier window.
func (g *gater) openJoin(token []byte, until time.Time, uses int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.joinToken = append([]byte(nil), token...)
	g.joinUntil = until
	g.joinUses = max(uses, 1)
	g.claims = map[peer.ID]int{}
	g.joined = map[peer.ID]bool{}
	g.joinGen++
}

func (g *gater) closeJoin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.joinToken = nil
	g.joinUntil = time.Time{}
	g.joinUses = 0
	g.claims, g.joined = nil, nil
	g.joinGen++
}

// joinOpen reports whether a join window is open now (not expired), whether or not
// its uses are spent: the gater admits a device with the network key until the
// window expires, so that one arriving with a spent invite hears ErrBadToken from
// the join protocol rather than a bare refused connection.
func (g *gater) joinOpen() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.windowLocked()
}

// openForLocked: the window is open for p's join: not expired, and p joined through
// it, holds one of its uses, or a use is left (neither spent nor held by a join in
// progress).
func (g *gater) openForLocked(p peer.ID) bool {
	return g.windowLocked() && (g.joined[p] || g.claims[p] > 0 || g.joinUses > len(g.claims))
}

// windowLocked: a window exists and has not expired (every use may be spent).
func (g *gater) windowLocked() bool {
	return len(g.joinToken) > 0 && g.now().Before(g.joinUntil)
}

// checkToken reports whether p may use the join protocol with token: it matches the
// open window's token (compared in constant time) and p joined through the window,
// holds one of its uses, or a use is left.
func (g *gater) checkToken(token []byte, p peer.ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.tokenLocked(token, p)
}

func (g *gater) tokenLocked(token []byte, p peer.ID) bool {
	return g.openForLocked(p) && subtle.ConstantTimeCompare(token, g.joinToken) == 1
}

// claimJoin holds one of the window's uses for p's join (checkToken's rule) and
// returns the window's generation, for endJoin.
func (g *gater) claimJoin(token []byte, p peer.ID) (gen uint64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.tokenLocked(token, p) {
		return 0, false
	}
	if !g.joined[p] {
		g.claims[p]++
	}
	return g.joinGen, true
}

// endJoin releases p's claim; a successful join spends the use. A window replaced
// or closed meanwhile is left alone.
func (g *gater) endJoin(gen uint64, p peer.ID, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen != g.joinGen {
		return
	}
	if ok {
		if !g.joined[p] {
			g.joinUses--
			g.joined[p] = true
		}
		delete(g.claims, p)
		return
	}
	if g.claims[p] > 1 {
		g.claims[p]--
	} else {
		delete(g.claims, p)
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
