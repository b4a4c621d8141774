package transport

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

// addrConn is a connection with only its addresses (moved reads nothing else).
type addrConn struct {
	network.Conn
	local, remote ma.Multiaddr
}

func (c addrConn) LocalMultiaddr() ma.Multiaddr  { return c.local }
func (c addrConn) RemoteMultiaddr() ma.Multiaddr { return c.remote }

// TestMovedConnections: which older direct connection a member's new one replaces
// (moved.go): one from another remote IP (it moved), or from a local IP this device no
// longer has (this device moved); not another from the same addresses.
func TestMovedConnections(t *testing.T) {
	conn := func(local, remote string) network.Conn {
		return addrConn{local: ma.StringCast(local), remote: ma.StringCast(remote)}
	}
	here := map[string]bool{"11.0.0.1": true, "10.4.0.2": true}
	fresh := conn("/ip4/11.0.0.1/tcp/7420", "/ip4/11.0.0.14/tcp/7420")
	for _, tc := range []struct {
		old   network.Conn
		local map[string]bool
		want  bool
	}{
		{conn("/ip4/11.0.0.1/tcp/7420", "/ip4/11.0.0.11/tcp/7420"), here, true},  // the member's old network
		{conn("/ip4/11.0.0.1/tcp/7420", "/ip4/11.0.0.14/tcp/5512"), here, false}, // same place, another port
		{conn("/ip4/10.1.0.2/tcp/7420", "/ip4/11.0.0.14/tcp/7420"), here, true},  // this device's old address
		{conn("/ip4/10.1.0.2/tcp/7420", "/ip4/11.0.0.14/tcp/7420"), nil, false},  // interfaces unknown: kept
	} {
		if got := moved(fresh, tc.old, tc.local); got != tc.want {
			t.Errorf("old %s -> %s: moved %v, want %v", tc.old.LocalMultiaddr(), tc.old.RemoteMultiaddr(), got, tc.want)
		}
	}
}
