package transport

import (
	"errors"
	"slices"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
)

func mas(t *testing.T, ss ...string) []ma.Multiaddr {
	t.Helper()
	out, err := parseAddrs(ss)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func addrSet(as []ma.Multiaddr) []string {
	out := addrStrings(as)
	slices.Sort(out)
	return out
}

// With --listen 0.0.0.0 a host's addresses are every interface's, loopback and
// link-local included, and invites carried them all (issue 24 item 7): only
// addresses another device can reach are published, unless the device listens on
// loopback only (one machine: tests, the demo).
func TestPublishedAddrsSkipLoopbackAndLinkLocal(t *testing.T) {
	pub := publishAddrs(nil, nil)
	got := addrSet(pub(mas(t, "/ip4/127.0.0.1/tcp/7420", "/ip4/192.0.2.2/tcp/7420", "/ip6/::1/tcp/7420",
		"/ip6/fe80::fc:ff:fe00:1/tcp/7420", "/ip6/fd00::2/tcp/7420")))
	want := []string{"/ip4/192.0.2.2/tcp/7420", "/ip6/fd00::2/tcp/7420"}
	if !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	if got := addrSet(pub(mas(t, "/ip4/127.0.0.1/tcp/7420", "/ip6/::1/tcp/7420"))); len(got) != 2 {
		t.Fatalf("loopback-only device published %v, want both loopback addresses", got)
	}
}

// --advertise replaces the listen addresses in everything this device publishes:
// its invite (P2PAddrs), identify (what members store in their address book), and
// the member lists it answers.
func TestAdvertiseAddrs(t *testing.T) {
	psk, _ := GeneratePSK()
	adv := []string{"/ip4/203.0.113.7/tcp/7420", "/dns4/home.example.net/tcp/7420"}
	h, err := NewHost(HostConfig{DataDir: t.TempDir(), PSK: psk, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		AdvertiseAddrs: adv, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got := addrSet(h.Addrs()); !slices.Equal(got, []string{"/dns4/home.example.net/tcp/7420", "/ip4/203.0.113.7/tcp/7420"}) {
		t.Fatalf("addrs %v, want the advertised ones", got)
	}
	for _, a := range h.P2PAddrs() {
		if _, err := a.ValueForProtocol(ma.P_P2P); err != nil {
			t.Fatalf("invite address %s lacks /p2p", a)
		}
	}
	for _, bad := range [][]string{{"/ip4/0.0.0.0/tcp/7420"}, {"/ip4/203.0.113.7/udp/7420/quic-v1"}, {"/ip4/203.0.113.7/tcp/0"}, {"nonsense"}} {
		_, err := NewHost(HostConfig{DataDir: t.TempDir(), PSK: psk, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
			AdvertiseAddrs: bad, Logger: testLogger(t)})
		if err == nil || !errors.Is(err, ErrBadAdvertise) {
			t.Errorf("advertise %v: %v, want ErrBadAdvertise", bad, err)
		}
	}
}
