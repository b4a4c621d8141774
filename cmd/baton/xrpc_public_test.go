package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/device"
)

// TestRunXRPCAddr: `run --xrpc-addr` on an atproto chain serves the repository's
// XRPC methods without a token and nothing of the API; on a chain in baton's own
// format it is refused (exit 2) before the node starts.
func TestRunXRPCAddr(t *testing.T) {
	baton := mustInit(t)
	code, _, errs := runCLI(t, nil, "", "run", "--data", baton, "--listen", "/ip4/127.0.0.1/tcp/0", "--xrpc-addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errs, "--xrpc-addr") || !strings.Contains(errs, "atproto") {
		t.Fatalf("--xrpc-addr on a baton chain: %d %q", code, errs)
	}

	data := filepath.Join(t.TempDir(), "a1")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", data, "--new-chain", "--format", "atproto"); code != 0 {
		t.Fatal(errs)
	}
	d, err := device.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	xaddr := freeAddr(t)
	_, stderr, stop := runInProcess(t, "run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--xrpc-addr", xaddr,
		"--ttl", "1s", "--tick", "100ms", "--raft-timeout", "300ms", "--log-level", "error")
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
