package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with serial to dir's
// cert.pem and key.pem and returns it.
func writeCert(t *testing.T, dir string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "baton test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"cert.pem": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"key.pem":  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTCPAPIOffLoopbackNeedsTLS: the TCP API's bearer token never crosses a network
// in clear (issue 39 item 4): an address off loopback without a certificate is
// refused with what to do; with one it serves HTTPS only, and a renewed certificate
// file is served without a restart.
func TestTCPAPIOffLoopbackNeedsTLS(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.7:8080"} {
		err := (&Config{Addr: addr, Token: testToken}).Validate()
		if err == nil || !strings.Contains(err.Error(), "in clear") || !strings.Contains(err.Error(), "--api-tls-cert") {
			t.Errorf("%s without TLS: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"} {
		if err := (&Config{Addr: addr, Token: testToken}).Validate(); err != nil {
			t.Errorf("loopback %s: %v", addr, err)
		}
	}
	dir := t.TempDir()
	first := writeCert(t, dir, 1)
	tc, err := TLSFromFiles(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Config{Addr: "0.0.0.0:8080", Token: testToken, TLS: tc}).Validate(); err != nil {
		t.Fatalf("off loopback with TLS: %v", err)
	}
	if _, err := TLSFromFiles(filepath.Join(dir, "none.pem"), filepath.Join(dir, "key.pem")); err == nil || !strings.Contains(err.Error(), "none.pem") {
		t.Fatalf("a missing certificate file: %v", err)
	}

	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 3))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{Addr: "127.0.0.1:0", Token: testToken, TLS: tc})
	served := func() *x509.Certificate {
		t.Helper()
		pool := x509.NewCertPool()
		b, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(b)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(context.Background(), "GET", "https://"+n.srv.Addr()+"/v1/state", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("https: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("https /v1/state: %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0]
	}
	if got := served(); got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("served serial %v, want %v", got.SerialNumber, first.SerialNumber)
	}
	resp, err := http.Get("http://" + n.srv.Addr() + "/v1/state")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the TLS listener answered plain HTTP")
		}
	}
	// A renewal: new files with a later modification time.
	later := time.Now().Add(2 * time.Second)
	second := writeCert(t, dir, 2)
	for _, p := range []string{"cert.pem", "key.pem"} {
		if err := os.Chtimes(filepath.Join(dir, p), later, later); err != nil {
			t.Fatal(err)
		}
	}
	if got := served(); got.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Fatalf("after the renewal: served serial %v, want %v", got.SerialNumber, second.SerialNumber)
	}
}

// TestXRPCOverTLS (issue 40 item 1): the public XRPC listener serves HTTPS with the
// certificate it is given, as a relay requires ("this relay requires host SSL"), and
// nothing in clear.
func TestXRPCOverTLS(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, 9)
	tc, err := TLSFromFiles(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := startAtprotoHolder(t, Config{XRPCAddr: "127.0.0.1:0", XRPCTLS: tc})
	b, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + n.srv.XRPCAddr() + "/xrpc/com.atproto.server.describeServer")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "did:web:") {
		t.Fatalf("describeServer over https: %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Get("http://" + n.srv.XRPCAddr() + "/xrpc/com.atproto.server.describeServer"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the public TLS listener answered plain HTTP")
		}
	}
}
