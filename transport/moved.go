package transport

import (
	"net"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
	maddrnet "github.com/multiformats/go-multiaddr/net"
)

// A member that moved (a laptop from home to a café) connects again from another
// address, while its old connection is dead without either end being told. libp2p
// opens a new stream on the connection with the most open streams, and the dead one
// kept every stream stuck on it: the Raft leader's heartbeats and replication went to
// it, each waiting for its 10 s deadline, until the dead connection was closed
// (testnet TestProcsNATRelayCut: the moved device followed 26-35 s after its move in
// 3 of 5 runs, though the leader had a live connection to it after 7 s). A new direct
// connection from a member therefore closes its other direct connections that cannot
// be current: from another remote IP (the member's network changed), or from a local
// IP this device no longer has (its own network changed).

// closeMovedConns closes p's direct connections that fresh, a new direct connection
// to member p, replaces (movedConns).
func (h *Host) closeMovedConns(fresh network.Conn) {
	if isRelayedConn(fresh) || !h.gater.isMember(fresh.RemotePeer()) {
		return
	}
	local := localIPs()
	for _, c := range h.h.Network().ConnsToPeer(fresh.RemotePeer()) {
		if c == fresh || isRelayedConn(c) || !moved(fresh, c, local) {
			continue
		}
		h.log.Info("a member connected from a new address: its connection from the old one is closed",
			"peer", fresh.RemotePeer(), "old", c.RemoteMultiaddr(), "new", fresh.RemoteMultiaddr())
		go func() { _ = c.Close() }()
	}
}

// moved reports whether old, another direct connection to the peer of fresh, cannot be
// current: its remote IP differs from fresh's, or its local IP is not one of local
// (nil: unknown, not checked).
func moved(fresh, old network.Conn, local map[string]bool) bool {
	newIP, ok1 := connIP(fresh.RemoteMultiaddr())
	oldIP, ok2 := connIP(old.RemoteMultiaddr())
	if ok1 && ok2 && !newIP.Equal(oldIP) {
		return true
	}
	if lip, ok := connIP(old.LocalMultiaddr()); ok && local != nil && !lip.IsUnspecified() && !local[lip.String()] {
		return true
	}
	return false
}

func isRelayedConn(c network.Conn) bool {
	_, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

func connIP(a ma.Multiaddr) (net.IP, bool) {
	ip, err := maddrnet.ToIP(a)
	return ip, err == nil && ip != nil
}

// localIPs returns this machine's interface addresses (nil when they cannot be read).
func localIPs() map[string]bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out[n.IP.String()] = true
		}
	}
	return out
}
