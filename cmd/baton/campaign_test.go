package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/api"
)

// Waiting for the lease is not opaque: `lease campaign` (and exec, which shares it)
// says on stderr what it waits for and who holds the lease; POST
// /v1/lease/campaign?wait= longer than one request may wait is refused with 400, not
// cut short at 30 s with a generic timeout (a9e37ae).
func TestCampaignSaysWhatItWaitsForAndRefusesLongWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node")
	}
	data := mustInit(t)
	runInProcess(t, append([]string{"run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0"}, opsFlags...)...)
	testutil.WaitFor(t, 30*time.Second, "the node to hold the lease", func() bool {
		st, err := stateOf(data)
		return err == nil && st.Lease.HeldByMe
	})
	code, out, errs := runCLI(t, nil, "", "lease", "campaign", "--data", data)
	if code != 0 || !strings.Contains(out, "this device holds the lease at epoch") || errs != "" {
		t.Errorf("campaign on the holder: %d %q %q", code, out, errs)
	}
	// Released, this device stands off for a moment: campaign waits and says why.
	if code, _, errs := runCLI(t, nil, "", "lease", "release", "--data", data); code != 0 {
		t.Fatalf("release: %d %s", code, errs)
	}
	code, out, errs = runCLI(t, nil, "", "lease", "campaign", "--data", data, "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "holds the lease") || !strings.Contains(errs, "waiting for this device") || !strings.Contains(errs, "nobody holds it") {
		t.Errorf("campaign after a release: %d %q %q", code, out, errs)
	}

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(data, api.SocketFile))
	}}}
	resp, err := hc.Post("http://baton/v1/lease/campaign?wait=60s", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "ask again") {
		t.Errorf("campaign?wait=60s: %d %s", resp.StatusCode, body)
	}
}
