package transport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

func TestWrongPSKFailsFastWithClearError(t *testing.T) {
	pskA, _ := GeneratePSK()
	pskB, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), pskA, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	b := newTestHost(t, t.TempDir(), pskB, "/ip4/127.0.0.1/tcp/0")
	defer b.Close()
	// Even with b admitted as a member on a, the network key differs.
	if err := a.AddMember(b.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	b.AllowPeer(a.AddrInfo())
	start := time.Now()
	err := a.Connect(ctxTimeout(t, 10*time.Second), b.AddrInfo())
	took := time.Since(start)
	if !errors.Is(err, ErrHandshake) {
		t.Fatalf("connect with another psk: got %v, want ErrHandshake", err)
	}
	if !strings.Contains(err.Error(), "handshake failed: wrong or missing network key?") {
		t.Fatalf("error text %q does not say why", err)
	}
	if took > 4*time.Second { // dial timeout is 2 s; a wrong key either fails at once or hangs until it
		t.Fatalf("wrong-key dial took %v, want within the dial timeout", took)
	}
	t.Logf("wrong key: %v (after %v)", err, took)
}

func TestNonMemberRefusedByGater(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	b := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer b.Close()
	err := b.Connect(ctxTimeout(t, 10*time.Second), a.AddrInfo())
	if err == nil {
		t.Fatal("a non-member connected without a join window")
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("non-member: got %v, want ErrRefused", err)
	}
	if a.LibP2P().Network().Connectedness(b.ID()) == 1 {
		t.Fatal("a still connected to b")
	}
	// A join window admits it (the join protocol then checks the token).
	a.AllowJoin([]byte("secret"), time.Now().Add(time.Minute))
	if err := b.Connect(ctxTimeout(t, 10*time.Second), a.AddrInfo()); err != nil {
		t.Fatalf("connect during join window: %v", err)
	}
	// An expired window admits nobody new.
	c := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer c.Close()
	a.AllowJoin([]byte("secret"), time.Now().Add(-time.Second))
	if err := c.Connect(ctxTimeout(t, 10*time.Second), a.AddrInfo()); err == nil {
		t.Fatal("connected through an expired join window")
	}
}

func TestIdentityPersistsAndCorruptIsError(t *testing.T) {
	dir := t.TempDir()
	k1, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("identity.key mode %v, want 0600", st.Mode().Perm())
	}
	k2, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equals(k2) {
		t.Fatal("identity changed across loads")
	}
	if err := os.WriteFile(filepath.Join(dir, IdentityFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateIdentity(dir); !errors.Is(err, ErrCorruptIdentity) {
		t.Fatalf("corrupt identity: got %v, want ErrCorruptIdentity", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, IdentityFile))
	if string(b) != "garbage" {
		t.Fatal("corrupt identity file was replaced")
	}
}

func TestPSKCodec(t *testing.T) {
	psk, err := GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := EncodePSK(psk)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(enc), "/key/swarm/psk/1.0.0/\n/base64/\n") {
		t.Fatalf("encoding %q is not the swarm key format", enc)
	}
	for _, in := range [][]byte{enc, []byte(strings.Split(string(enc), "\n")[2])} {
		got, err := DecodePSK(in)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(psk) {
			t.Fatal("psk round trip changed the key")
		}
	}
	path := filepath.Join(t.TempDir(), "swarm.key")
	if err := WritePSKFile(path, psk); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPSKFile(path)
	if err != nil || string(got) != string(psk) {
		t.Fatalf("psk file round trip: %v", err)
	}
	if _, err := DecodePSK([]byte("c2hvcnQ=")); !errors.Is(err, ErrNoPSK) {
		t.Fatalf("short key: got %v, want ErrNoPSK", err)
	}
}

func TestHostConfigValidation(t *testing.T) {
	psk, _ := GeneratePSK()
	if _, err := NewHost(HostConfig{DataDir: t.TempDir()}); !errors.Is(err, ErrNoPSK) {
		t.Fatalf("no psk: got %v, want ErrNoPSK", err)
	}
	for _, a := range []string{"/ip4/127.0.0.1/udp/0/quic-v1", "/ip4/127.0.0.1/udp/0/quic-v1/webtransport", "/ip4/127.0.0.1/udp/0/webrtc-direct"} {
		_, err := NewHost(HostConfig{DataDir: t.TempDir(), PSK: psk, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0", a}})
		if !errors.Is(err, ErrUnsupportedAddr) {
			t.Fatalf("%s: got %v, want ErrUnsupportedAddr", a, err)
		}
	}
	// IPv6 loopback works when the machine has it.
	h, err := NewHost(HostConfig{DataDir: t.TempDir(), PSK: psk, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0", "/ip6/::1/tcp/0"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if len(h.Addrs()) == 0 {
		t.Fatal("no listen addresses")
	}
}

func TestAddrBookPersists(t *testing.T) {
	psk, _ := GeneratePSK()
	dir := t.TempDir()
	a := newTestHost(t, dir, psk, "/ip4/127.0.0.1/tcp/0")
	b := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer b.Close()
	if err := a.AddMember(b.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, AddrBookFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("members.json mode %v", st.Mode().Perm())
	}
	b.AllowPeer(peerInfoOf(t, dir)) // b must admit a's restarted host
	a2 := newTestHost(t, dir, psk, "/ip4/127.0.0.1/tcp/0")
	defer a2.Close()
	if !a2.IsMember(b.ID()) {
		t.Fatal("member not admitted after restart")
	}
	ms := a2.Members()
	if len(ms) != 1 || ms[0].ID != b.ID() || len(ms[0].Addrs) == 0 {
		t.Fatalf("members after restart: %v", ms)
	}
	// Members are pre-connected at start.
	waitFor(t, 5*time.Second, "pre-connection to the member", func() bool {
		return a2.LibP2P().Network().Connectedness(b.ID()) == 1
	})
	if err := os.WriteFile(filepath.Join(dir, AddrBookFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHost(HostConfig{DataDir: dir, PSK: psk, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}}); err == nil {
		t.Fatal("corrupt address book accepted")
	}
}

// A libp2p host without any network key cannot connect to a baton host, nor be
// connected to by one.
func TestNoPSKPeerCannotConnect(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	plain, err := libp2p.New(
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.DisableRelay(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Connect(ctxTimeout(t, time.Second), a.AddrInfo()); err == nil {
		t.Fatal("a host without the network key connected")
	}
	if err := a.AddMember(peer.AddrInfo{ID: plain.ID(), Addrs: plain.Addrs()}); err != nil {
		t.Fatal(err)
	}
	err = a.Connect(ctxTimeout(t, 5*time.Second), peer.AddrInfo{ID: plain.ID(), Addrs: plain.Addrs()})
	if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "wrong or missing network key?") {
		t.Fatalf("dial to a host without the key: got %v, want ErrHandshake", err)
	}
}

// A listen address in use, by another baton host or by any other program, is refused
// with ErrAddrInUse naming it, also when it is only one of several addresses.
func TestListenAddrInUse(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	used := a.Addrs()[0].String()
	newHost := func(addrs ...string) (*Host, error) {
		return NewHost(HostConfig{DataDir: t.TempDir(), PSK: psk, ListenAddrs: addrs, Logger: testLogger(t)})
	}
	check := func(what string, h *Host, err error, addr string) {
		t.Helper()
		if err == nil {
			h.Close()
			t.Fatalf("%s: a second host listens on %s", what, addr)
		}
		if !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("%s: got %v, want ErrAddrInUse naming %s", what, err, addr)
		}
		t.Logf("%s: %v", what, err)
	}
	h, err := newHost(used)
	check("another libp2p host", h, err, used)
	h, err = newHost("/ip4/127.0.0.1/tcp/0", used)
	check("one of two addresses", h, err, used)

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	plain := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ln.Addr().(*net.TCPAddr).Port)
	h, err = newHost(plain)
	check("a plain listener", h, err, plain)

	// The same port on IPv4 and IPv6 is two addresses, not a conflict.
	if l6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		l6.Close()
		port := a.Addrs()[0].String()[len("/ip4/127.0.0.1/tcp/"):]
		a.Close()
		h, err := newHost("/ip4/127.0.0.1/tcp/"+port, "/ip6/::1/tcp/"+port)
		if err != nil {
			t.Fatalf("same port on IPv4 and IPv6: %v", err)
		}
		h.Close()
	}
}

// The addresses a dial is given survive an identify exchange with the peer. libp2p's
// identify expires every address whose TTL is exactly peerstore.TempAddrTTL when it
// hears from the peer, which is the TTL libp2p's own Connect (and ours, before) gave
// them: an identify message from a peer reached through a relay, arriving between
// the AddAddrs and the dial, left the dial without them (TestDeadDirectBesideRelayClosed
// failed so in CI: "all dials failed", only the published address tried).
func TestDialAddrsOutliveIdentify(t *testing.T) {
	psk, _ := GeneratePSK()
	a := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer a.Close()
	b := newTestHost(t, t.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
	defer b.Close()
	a.AllowJoin([]byte("secret"), time.Now().Add(time.Minute))
	extra := ma.StringCast("/ip4/127.0.0.1/tcp/1") // another path to a, say a proxy's
	info := a.AddrInfo()
	info.Addrs = append(info.Addrs, extra)
	// Connect returns once identify has run on the new connection (basichost waits
	// for it), and identify then expires the peer's temporary addresses.
	if err := b.Connect(ctxTimeout(t, 10*time.Second), info); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(b.LibP2P().Peerstore().Addrs(a.ID()), extra.Equal) {
		t.Fatalf("identify dropped the address b was given for a: peerstore holds %v", b.LibP2P().Peerstore().Addrs(a.ID()))
	}
}
