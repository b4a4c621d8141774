package acme

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
)

// LetsEncrypt is the directory of the default CA.
const LetsEncrypt = certmagic.LetsEncryptProductionCA

// Config says what to get a certificate for, from where, and where to answer.
type Config struct {
	// Host is the name to get the certificate for (the public host relays crawl:
	// no scheme, no port). Required.
	Host string
	// CA is the ACME directory URL. Optional, default LetsEncrypt.
	CA string
	// Roots, when set, are the roots trusted for the CA's own HTTPS (a private CA:
	// a local pebble or step-ca). Optional: the system's roots.
	Roots *x509.CertPool
	// Email is the account's contact. Optional.
	Email string
	// AccountSeed is the secret the ACME account key is derived from (AccountKey):
	// every device that serves Host must pass the same one, so that any of them
	// can answer the CA's challenge for another. Required, at least 32 bytes.
	AccountSeed []byte
	// HTTPAddr is the listen address (host:port) of the challenge listener; the CA
	// connects to port 80 of the name. Required.
	HTTPAddr string
	// Dir keeps the certificates and the account (certmagic's file storage).
	// Required.
	Dir string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first missing or malformed field, naming it.
func (c *Config) Validate() error {
	if err := CheckHost(c.Host); err != nil {
		return err
	}
	switch {
	case len(c.AccountSeed) < 32:
		return errors.New("the account seed has fewer than 32 bytes")
	case c.HTTPAddr == "":
		return errors.New("no challenge listen address")
	case c.Dir == "":
		return errors.New("no directory for the certificates")
	}
	if c.CA != "" {
		if u, err := url.Parse(c.CA); err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("CA %q: not an https:// ACME directory URL", c.CA)
		}
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("challenge listen address %q: %v", c.HTTPAddr, err)
	}
	return nil
}

// CheckHost says whether name can be the public host: a DNS name, without a scheme or
// a port, not an IP address (what a certificate is issued for and relays crawl).
func CheckHost(name string) error {
	switch {
	case name == "":
		return errors.New("no host name")
	case strings.ContainsAny(name, ":/ ") || net.ParseIP(name) != nil:
		return fmt.Errorf("host %q is not a DNS name (no scheme, no port, not an IP address)", name)
	}
	return nil
}

// AccountKey derives the ACME account key (ECDSA P-256, what every ACME CA takes)
// from seed with HKDF-SHA256 under a label of its own: the same seed gives the same
// key on every device, and the key reveals nothing of the seed.
func AccountKey(seed []byte) (*ecdsa.PrivateKey, error) {
	for i := range 16 { // a derived scalar is out of range with probability 2^-32
		b, err := hkdf.Key(sha256.New, seed, nil, "baton acme account key v1 "+strconv.Itoa(i), 32)
		if err != nil {
			return nil, err
		}
		if k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), b); err == nil {
			return k, nil
		}
	}
	return nil, errors.New("no valid account key derived from the seed")
}

// Manager keeps the certificate of Config.Host: it answers challenges on its
// listener and serves the certificate through TLSConfig.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	magic  *certmagic.Config
	cache  *certmagic.Cache
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup

	thumbprint string // the account key's JWK thumbprint (RFC 7638)
}

// Start validates cfg, listens on cfg.HTTPAddr and starts getting (or loading) the
// certificate in the background: TLS handshakes fail until it is there, and the
// outcome is logged ("certificate obtained", or a warning saying why not).
func Start(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key, err := AccountKey(cfg.AccountSeed)
	if err != nil {
		return nil, err
	}
	thumb, err := (&acme.Account{PrivateKey: key}).Thumbprint()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificate directory: %w", err)
	}
	host, port, _ := net.SplitHostPort(cfg.HTTPAddr)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("challenge listener: %w (a port below 1024 needs root or CAP_NET_BIND_SERVICE: listen on a higher port and forward the name's port 80 to it)", err)
		}
		return nil, fmt.Errorf("challenge listener: %w", err)
	}
	m := &Manager{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()).With("host", cfg.Host), ln: ln, thumbprint: thumb}
	zl := zapToSlog(m.log)
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		Logger:           zl,
	})
	m.magic = certmagic.New(m.cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: cfg.Dir},
		Logger:  zl,
		OnEvent: m.event,
	})
	p, _ := strconv.Atoi(port) // SplitHostPort and Listen accepted it
	if p == 0 {
		p = ln.Addr().(*net.TCPAddr).Port
	}
	issuer := certmagic.NewACMEIssuer(m.magic, certmagic.ACMEIssuer{
		CA:     cmp.Or(cfg.CA, LetsEncrypt),
		TestCA: cmp.Or(cfg.CA, LetsEncrypt), // no staging detour for a private CA
		Email:  cfg.Email,
		Agreed: true,
		// The account registered (or found: a CA answers an existing key with
		// its account) is the derived one, whichever device registers first.
		NewAccountFunc: func(_ context.Context, _ *certmagic.ACMEIssuer, a acme.Account) (acme.Account, error) {
			a.PrivateKey = key
			return a, nil
		},
		// HTTP-01 only, answered by our listener (certmagic finds the port taken
		// and starts none of its own). TLS-ALPN-01 would need port 443 on every
		// serving device and is answered only by the device that asked.
		DisableTLSALPNChallenge:   true,
		DisableDistributedSolvers: true, // the storage is each device's own
		ListenHost:                host,
		AltHTTPPort:               p,
		TrustedRoots:              cfg.Roots,
		Logger:                    zl,
	})
	m.magic.Issuers = []certmagic.Issuer{issuer}
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go m.srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go m.manage(ctx)
	return m, nil
}

// manage gets the certificate unless it is stored (retrying, backing off, until ctx
// ends), then puts it in the cache, whose maintenance renews it (certmagic: about a
// third of its lifetime before it expires).
func (m *Manager) manage(ctx context.Context) {
	defer m.wg.Done()
	err := m.magic.ObtainCertAsync(ctx, m.cfg.Host)
	if err == nil {
		err = m.magic.ManageSync(ctx, []string{m.cfg.Host})
	}
	if err != nil && ctx.Err() == nil {
		m.log.Warn("could not get the certificate; restart to try again", "err", err)
	}
}

// Leaf is the certificate served for Host now, or an error saying there is none yet.
func (m *Manager) Leaf() (*x509.Certificate, error) {
	for _, c := range m.cache.AllMatchingCertificates(m.cfg.Host) {
		if c.Leaf != nil {
			return c.Leaf, nil
		}
	}
	return nil, errors.New("no certificate yet: being obtained (the device's log says how it goes)")
}

// HTTPAddr is the challenge listener's address.
func (m *Manager) HTTPAddr() string { return m.ln.Addr().String() }

// TLSConfig is the server configuration of the public listener: the managed
// certificate for Host.
func (m *Manager) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: m.magic.GetCertificate, MinVersion: tls.VersionTLS12}
}

// Close stops the listener, the renewals and any obtain in flight.
func (m *Manager) Close() error {
	var err error
	m.once.Do(func() {
		m.cancel()
		err = m.srv.Close()
		m.wg.Wait()
		m.cache.Stop()
	})
	return err
}

// challengePath is where an HTTP-01 challenge asks for its token (RFC 8555 8.3).
const challengePath = "/.well-known/acme-challenge/"

// serveHTTP answers any HTTP-01 challenge with the shared account's key
// authorization (token "." thumbprint): the one this device's order asked for
// and any other serving device's alike (RFC 8555 section 8.3 asks such a server
// to check the token's syntax: base64url). Every other request is sent to
// https://Host.
func (m *Manager) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if token, ok := strings.CutPrefix(r.URL.Path, challengePath); ok && r.Method == http.MethodGet {
		if _, err := base64.RawURLEncoding.DecodeString(token); err != nil || token == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, token+"."+m.thumbprint)
		m.log.Debug("answered an ACME challenge", "remote", r.RemoteAddr)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "use https://"+m.cfg.Host, http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, "https://"+m.cfg.Host+r.URL.RequestURI(), http.StatusMovedPermanently)
}

// event logs certmagic's outcomes in baton's words (its own log lines are debug).
func (m *Manager) event(_ context.Context, event string, data map[string]any) error {
	switch event {
	case "cert_obtained":
		m.log.Info("certificate obtained", "renewal", data["renewal"], "issuer", data["issuer"])
	case "cert_failed":
		m.log.Warn("could not get the certificate; trying again later", "renewal", data["renewal"], "err", data["error"])
	}
	return nil
}
