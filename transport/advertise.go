package transport

import (
	"errors"
	"fmt"

	ma "github.com/multiformats/go-multiaddr"
	mnet "github.com/multiformats/go-multiaddr/net"
)

// ErrBadAdvertise means an advertised address is not one another device can dial: not
// TCP over ip4, ip6 or dns, port 0, or an unspecified IP (0.0.0.0, ::).
var ErrBadAdvertise = errors.New("transport: advertised address must be a TCP multiaddr with a host and a port other devices can dial")

// parseAdvertise checks an advertised address (HostConfig.AdvertiseAddrs).
func parseAdvertise(s string) (ma.Multiaddr, error) {
	a, err := parseListenAddr(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadAdvertise, s, err)
	}
	if port, err := a.ValueForProtocol(ma.P_TCP); err != nil || port == "0" {
		return nil, fmt.Errorf("%w: %q has no port", ErrBadAdvertise, s)
	}
	if mnet.IsIPUnspecified(a) {
		return nil, fmt.Errorf("%w: %q is unspecified (name this device's address)", ErrBadAdvertise, s)
	}
	if _, err := a.ValueForProtocol(ma.P_P2P); err == nil {
		return nil, fmt.Errorf("%w: %q: leave out /p2p", ErrBadAdvertise, s)
	}
	return a, nil
}

// publishAddrs returns the libp2p address factory: what this device tells others
// (invites, identify, member lists). With advertised addresses, those and the relay
// (/p2p-circuit) addresses (libp2p's and this device's reservations); without, the listen addresses minus link-local ones and
// minus loopback ones unless the device listens on loopback only (one machine: tests,
// the demo), because another device cannot dial them.
func publishAddrs(adv []ma.Multiaddr, circuits func() []ma.Multiaddr) func([]ma.Multiaddr) []ma.Multiaddr {
	return func(in []ma.Multiaddr) []ma.Multiaddr {
		var relayed, direct []ma.Multiaddr
		if circuits != nil {
			relayed = append(relayed, circuits()...)
		}
		for _, a := range in {
			if _, ok := relayOf(a); ok {
				relayed = append(relayed, a)
			} else {
				direct = append(direct, a)
			}
		}
		if len(adv) > 0 {
			return append(append([]ma.Multiaddr(nil), adv...), relayed...)
		}
		out := make([]ma.Multiaddr, 0, len(in))
		loopbackOnly := true
		for _, a := range direct {
			if !mnet.IsIPLoopback(a) && !mnet.IsIP6LinkLocal(a) {
				loopbackOnly = false
			}
		}
		for _, a := range direct {
			if mnet.IsIP6LinkLocal(a) || (mnet.IsIPLoopback(a) && !loopbackOnly) {
				continue
			}
			out = append(out, a)
		}
		return append(out, relayed...)
	}
}
