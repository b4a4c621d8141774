package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
)

// events collects the Manager's log messages at info and above.
type events struct {
	mu   sync.Mutex
	msgs []string
}

func (e *events) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (e *events) Handle(_ context.Context, r slog.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "error" {
			m += ": " + a.Value.String()
		}
		return true
	})
	e.msgs = append(e.msgs, m)
	return nil
}
func (e *events) WithAttrs([]slog.Attr) slog.Handler { return e }
func (e *events) WithGroup(string) slog.Handler      { return e }
func (e *events) has(msg string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.msgs {
		if strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

// certFor is the certificate chain m serves for host in a TLS handshake, or nil.
func certFor(m *Manager, host string) []*x509.Certificate {
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	go tls.Server(sc, m.TLSConfig()).Handshake()                                 // ends when cc closes
	c := tls.Client(cc, &tls.Config{ServerName: host, InsecureSkipVerify: true}) // verified apart (pebble.verify)
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		return nil
	}
	return c.ConnectionState().PeerCertificates
}

func seed(b byte) []byte { return []byte(strings.Repeat(string(rune('a'+b)), 32)) }

// Two devices serve one name; the CA's validation reaches only the second one's
// challenge listener (the name's DNS points there). Both get a certificate: the
// second answers the first's challenge, because their account key comes from the
// same seed. A third device with another seed is refused: nobody it can reach
// answers for its account.
func TestAnyServingDeviceAnswersTheChallenge(t *testing.T) {
	const host = "localhost" // pebble resolves it with the system's resolver: 127.0.0.1
	port := testutil.StablePort(t)
	p := testutil.StartPebble(t, port)
	start := func(s []byte, addr string, ev *events) *Manager {
		t.Helper()
		m, err := Start(Config{Host: host, CA: p.Directory, Roots: p.Roots, AccountSeed: s,
			HTTPAddr: addr, Dir: t.TempDir(), Logger: slog.New(ev)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	var evB, evA, evC events
	b := start(seed(0), fmt.Sprintf("127.0.0.1:%d", port), &evB) // the one the CA reaches
	a := start(seed(0), "127.0.0.1:0", &evA)                     // the CA never reaches it
	for _, d := range []struct {
		name string
		m    *Manager
		ev   *events
	}{{"b", b, &evB}, {"a", a, &evA}} {
		if err := wait.For(20*time.Second, d.name+"'s certificate", func() bool { return certFor(d.m, host) != nil }); err != nil {
			t.Fatalf("%v (log: %q)", err, d.ev.msgs)
		}
		if err := p.Verify(certFor(d.m, host), host); err != nil {
			t.Fatalf("%s serves a certificate that does not verify under the CA's root: %v", d.name, err)
		}
		if !d.ev.has("certificate obtained") {
			t.Errorf("%s never logged that it obtained the certificate: %q", d.name, d.ev.msgs)
		}
	}

	c := start(seed(1), "127.0.0.1:0", &evC)
	if err := wait.For(90*time.Second, "c's refusal", func() bool { return evC.has("could not get the certificate") }); err != nil {
		t.Fatalf("%v: a device with another account got a certificate through b? (log: %q)", err, evC.msgs)
	}
	if certFor(c, host) != nil {
		t.Fatal("c has a certificate though nobody the CA reaches answers for its account")
	}
}

// The challenge listener sends everything that is not a challenge to https://Host.
func TestChallengeListenerRedirects(t *testing.T) {
	p := testutil.StartPebble(t, testutil.StablePort(t))
	m, err := Start(Config{Host: "localhost", CA: p.Directory, Roots: p.Roots, AccountSeed: seed(0),
		HTTPAddr: "127.0.0.1:0", Dir: t.TempDir(), Logger: slog.New(&events{})})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Get("http://" + m.HTTPAddr() + "/xrpc/com.atproto.sync.getLatestCommit?did=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "https://localhost/xrpc/com.atproto.sync.getLatestCommit?did=x"; resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
		t.Fatalf("GET on the challenge listener: %d %q, want 301 %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	// A challenge is answered with the account's key authorization, a token that is not
	// base64url is not.
	key, _ := AccountKey(seed(0))
	thumb, _ := (&acme.Account{PrivateKey: key}).Thumbprint()
	for token, want := range map[string]int{"aB3-_x": http.StatusOK, "a.b": http.StatusNotFound, "a%21b": http.StatusNotFound} {
		resp, err := cl.Get("http://" + m.HTTPAddr() + "/.well-known/acme-challenge/" + token)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want == http.StatusOK && string(body) != token+"."+thumb {
			t.Errorf("challenge %q: %d %q, want %d", token, resp.StatusCode, body, want)
		}
	}
}

func TestAccountKey(t *testing.T) {
	k1, err := AccountKey(seed(0))
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := AccountKey(seed(0))
	k3, _ := AccountKey(seed(1))
	if !k1.Equal(k2) {
		t.Fatal("the same seed gave two account keys: devices could not answer for each other")
	}
	if k1.Equal(k3) {
		t.Fatal("two seeds gave one account key")
	}
	if k1.Curve.Params().Name != "P-256" {
		t.Fatalf("account key on %s, want P-256", k1.Curve.Params().Name)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Host: "pds.example.com", AccountSeed: seed(0), HTTPAddr: ":80", Dir: "d"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Host = "" }, "no host name"},
		{func(c *Config) { c.Host = "pds.example.com:443" }, "not a DNS name"},
		{func(c *Config) { c.Host = "https://pds.example.com" }, "not a DNS name"},
		{func(c *Config) { c.Host = "192.0.2.1" }, "not a DNS name"},
		{func(c *Config) { c.AccountSeed = []byte("short") }, "fewer than 32 bytes"},
		{func(c *Config) { c.HTTPAddr = "" }, "no challenge listen address"},
		{func(c *Config) { c.HTTPAddr = "80" }, "challenge listen address"},
		{func(c *Config) { c.Dir = "" }, "no directory"},
		{func(c *Config) { c.CA = "http://ca.example/dir" }, "not an https:// ACME directory URL"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", cfg, err, c.want)
		}
	}
}

// A challenge port the process may not bind says what to do (as an unprivileged user:
// ports below 1024); one taken says so.
func TestChallengeListenerRefused(t *testing.T) {
	taken, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = Start(Config{Host: "localhost", AccountSeed: seed(0), HTTPAddr: taken.Addr().String(), Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "challenge listener") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a taken challenge port: %v", err)
	}
}
