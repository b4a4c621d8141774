package testutil

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"testing"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
)

// Pebble is a real ACME server (letsencrypt/pebble, in process) on loopback. Its
// validation authority dials an HTTP-01 challenge at port HTTPPort of the name
// (resolved by the system: use "localhost"), and validates without pebble's random
// sleeps.
type Pebble struct {
	Directory string         // the ACME directory URL
	Roots     *x509.CertPool // trusted for the directory's own HTTPS
	RootsPEM  []byte         // the same, PEM (a --acme-ca-root file)
	Issuer    *x509.Certificate
	HTTPPort  int
}

// StartPebble starts a Pebble until the test ends. It sets PEBBLE_VA_NOSLEEP, so
// the test cannot be parallel.
func StartPebble(tb testing.TB, httpPort int) *Pebble {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	}
	logger := log.New(io.Discard, "pebble ", 0)
	store := db.NewMemoryStore()
	c := ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	v := va.New(logger, httpPort, 0, false, "", store)
	w := wfe.New(logger, store, v, c, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	srv := httptest.NewTLSServer(w.Handler())
	tb.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	return &Pebble{
		Directory: srv.URL + wfe.DirectoryPath,
		Roots:     roots,
		RootsPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
		Issuer:    c.GetRootCert(0).Cert,
		HTTPPort:  httpPort,
	}
}

// Verify reports whether chain (a served leaf, then its intermediates) verifies for
// host under the root pebble issues from.
func (p *Pebble) Verify(chain []*x509.Certificate, host string) error {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.Issuer)
	_, err := chain[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: inter})
	return err
}
