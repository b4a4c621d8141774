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

func (g *gater) openJoin(token []byte, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.joinToken = append([]byte(nil), token...)
	g.joinUntil = until
}

func (g *gater) closeJoin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.joinToken = nil
	g.joinUntil = time.Time{}
}

// joinOpen reports whether a join window is open now.
func (g *gater) joinOpen() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.joinToken) > 0 && g.now().Before(g.joinUntil)
}

// checkToken compares token with the open window's token in constant time.
func (g *gater) checkToken(token []byte) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if len(g.joinToken) == 0 || !g.now().Before(g.joinUntil) {
		return false
	}
	return subtle.ConstantTimeCompare(token, g.joinToken) == 1
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
	if g.joinOpen() {
		g.log.Info("gater: admitted non-member during join window", "peer", p, "remote", addrs.RemoteMultiaddr())
		return true
	}
	g.log.Warn("gater: refused connection from non-member", "peer", p, "remote", addrs.RemoteMultiaddr())
	return false
}

func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
