package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/device"
)

// TestRunXRPCAddr: `run --xrpc-addr` on an atproto chain serves the repository's
// XRPC methods without a token and nothing of the API; on a chain in baton's own
// format it is refused (exit 2) before the node starts.
// fakeRelay counts requestCrawl as a relay would receive it (the real relay runs in
// testnet; signer/api's tests follow its status).
type fakeRelay struct {
	mu sync.Mutex
	n  int
}

func (f *fakeRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/xrpc/com.atproto.sync.requestCrawl" && r.Method == http.MethodPost {
		f.n++
		return
	}
	http.NotFound(w, r)
}

func (f *fakeRelay) crawls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func TestRunXRPCAddr(t *testing.T) {
	baton := mustInit(t)
	code, _, errs := runCLI(t, nil, "", "run", "--data", baton, "--listen", "/ip4/127.0.0.1/tcp/0", "--xrpc-addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errs, "--xrpc-addr") || !strings.Contains(errs, "atproto") {
		t.Fatalf("--xrpc-addr on a baton chain: %d %q", code, errs)
	}

	data, d := initAtproto(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--crawl", "https://relay.example"}, "--crawl and --public-host go with --xrpc-addr"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--crawl", "https://relay.example"}, "go together"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--crawl", "relay.example", "--public-host", "pds.example.com"}, "base URL"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--crawl", "https://relay.example", "--public-host", "pds.example.com:2583"}, "no port"},
	} {
		code, _, errs := runCLI(t, nil, "", append([]string{"run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, errs, tc.want)
		}
	}
	// A relay (a fake answering as indigo's does) is told at start; status shows its view.
	relay := &fakeRelay{}
	rsrv := httptest.NewServer(relay)
	defer rsrv.Close()
	xaddr := freeAddr(t)
	_, stderr, stop := runInProcess(t, "run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--xrpc-addr", xaddr,
		"--crawl", rsrv.URL, "--public-host", "pds.example.com",
		"--ttl", "1s", "--tick", "100ms", "--raft-timeout", "300ms", "--log-level", "error")
	testutil.WaitFor(t, 20*time.Second, "the relay asked to crawl, and status showing it", func() bool {
		code, out, _ := runCLI(t, nil, "", "status", "--data", data)
		return relay.crawls() == 1 && code == 0 && strings.Contains(out, "public: "+xaddr+" as pds.example.com, plain HTTP") && strings.Contains(out, "relays: 1") && strings.Contains(out, rsrv.URL) && strings.Contains(out, "1 crawl requests")
	})
	base := "http://" + xaddr
	// No commit yet: the repository is not found, in XRPC's words, without a token.
	testutil.WaitFor(t, 20*time.Second, "the public listener answers", func() bool {
		code, body, err := httpGet(base + "/xrpc/com.atproto.sync.getLatestCommit?did=" + d.Chain)
		return err == nil && code == http.StatusBadRequest && strings.Contains(body, `"error":"RepoNotFound"`)
	})
	for _, p := range []string{"/v1/state", "/metrics", "/healthz"} {
		if code, _, err := httpGet(base + p); err != nil || code != http.StatusNotFound {
			t.Errorf("the public listener serves %s: %d %v", p, code, err)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("run after Ctrl-C: exit %d\n%s", code, stderr.String())
	}
}

// TestRunACME: `run --acme` gets the public listener's certificate from an ACME CA
// (pebble, in process) for --public-host, answering the CA's HTTP challenge on
// --acme-http-addr, and serves the repository over HTTPS with it; the flags that
// cannot go together are refused before anything starts.
func TestRunACME(t *testing.T) {
	data, d := initAtproto(t)
	p := testutil.StartPebble(t, testutil.StablePort(t))
	root := filepath.Join(t.TempDir(), "pebble.pem")
	if err := os.WriteFile(root, p.RootsPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--acme"}, "--acme goes with --xrpc-addr and --public-host"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--acme"}, "--acme goes with --xrpc-addr and --public-host"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--public-host", "localhost"}, "--public-host with --acme"},
		{[]string{"--acme-ca", p.Directory}, "--acme-ca goes with --acme"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--public-host", "localhost", "--acme", "--acme-ca", "http://ca.example/dir"}, "not an https://"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--public-host", "localhost", "--acme", "--acme-ca-root", data}, "--acme-ca-root"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--public-host", "localhost", "--acme", "--acme-http-addr", "80"}, "challenge listen address"},
		{[]string{"--xrpc-addr", "127.0.0.1:0", "--public-host", "localhost", "--acme", "--xrpc-tls-cert", root, "--xrpc-tls-key", root}, "two sources of one certificate"},
	} {
		code, _, errs := runCLI(t, nil, "", append([]string{"run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, errs, tc.want)
		}
	}

	xaddr := freeAddr(t)
	_, stderr, stop := runInProcess(t, "run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--xrpc-addr", xaddr,
		"--public-host", "localhost", "--acme", "--acme-ca", p.Directory, "--acme-ca-root", root,
		"--acme-http-addr", fmt.Sprintf("127.0.0.1:%d", p.HTTPPort),
		"--ttl", "1s", "--tick", "100ms", "--raft-timeout", "300ms")
	roots := x509.NewCertPool()
	roots.AddCert(p.Issuer)
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
	var last string
	testutil.WaitFor(t, 60*time.Second, "the repository over HTTPS under the CA's certificate for localhost", func() bool {
		resp, err := cl.Get("https://" + xaddr + "/xrpc/com.atproto.sync.getLatestCommit?did=" + d.Chain)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusBadRequest // RepoNotFound before the first commit
	})
	// status says what the public listener serves, the certificate included.
	code, out, _ := runCLI(t, nil, "", "status", "--data", data)
	if code != 0 || !strings.Contains(out, "public: "+xaddr+" as localhost") || !regexp.MustCompile(`certificate: localhost, by Pebble .*, expires \d{4}-\d\d-\d\d, in \d+ days`).MatchString(out) {
		t.Errorf("status does not show the public listener's certificate: %d\n%s", code, out)
	}
	if code := stop(); code != 0 {
		t.Fatalf("run after Ctrl-C: exit %d (last answer %s)\n%s", code, last, stderr.String())
	}
	if !strings.Contains(stderr.String(), "certificate obtained") {
		t.Errorf("no log line says the certificate was obtained:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(data, acmeDir)); err != nil {
		t.Errorf("the certificate is not kept in the data dir: %v", err)
	}
}

// initAtproto makes a device of a new atproto chain (`init --new-chain --format
// atproto`) and returns its data dir and device file.
func initAtproto(t *testing.T) (string, *device.Device) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "a1")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", data, "--new-chain", "--format", "atproto"); code != 0 {
		t.Fatal(errs)
	}
	d, err := device.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	return data, d
}
