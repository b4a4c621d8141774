package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

func TestOpsEndpoints(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 4))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{})
	c, err := NewClient(n.APISocket(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hc := rawHTTP(n.APISocket())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Campaign blocks until the node holds.
	lease, err := c.Campaign(ctx)
	if err != nil || !lease.HeldByMe || lease.Holder != n.ID() {
		t.Fatalf("campaign: %+v %v", lease, err)
	}
	if code, ej, _ := doRaw(t, hc, "POST", "/v1/lease/campaign?wait=soon", ""); code != 400 || ej.Error != CodeBadRequest {
		t.Fatalf("campaign bad wait: %d %+v", code, ej)
	}

	ps, q, err := c.Peers(ctx)
	if err != nil || len(ps) != 1 || !ps[0].Self || !q.OK || q.Voters != 1 {
		t.Fatalf("peers: %+v %+v %v", ps, q, err)
	}

	// The watch stream: the current lease first, then the release and the reclaim.
	wctx, wcancel := context.WithCancel(ctx)
	events, errc := c.WatchLease(wctx, false)
	if e := <-events; e.Event != "current" || !e.HeldByMe {
		t.Fatalf("first watch line: %+v", e)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for e := range events {
		got = append(got, e.Event)
		if e.Event == "claim" {
			break
		}
	}
	if s := strings.Join(got, ","); !strings.Contains(s, "release") || !strings.Contains(s, "lost") {
		t.Fatalf("watch events: %s", s)
	}
	wcancel()
	for range events {
	}
	if err := <-errc; err != nil {
		t.Fatalf("watch after cancel: %v", err)
	}
	if code, _, _ := doRaw(t, hc, "GET", "/v1/lease/watch?renewals=maybe", ""); code != 400 {
		t.Fatalf("watch bad param: %d", code)
	}

	// The history: filters, and a release with no time of its own.
	all, err := c.LeaseHistory(ctx, HistoryFilter{})
	if err != nil || len(all) < 3 {
		t.Fatalf("history: %+v %v", all, err)
	}
	rel, err := c.LeaseHistory(ctx, HistoryFilter{Events: []string{"release"}})
	if err != nil || len(rel) != 1 || rel[0].TS != 0 || rel[0].LeaseTS == 0 {
		t.Fatalf("release history: %+v %v", rel, err)
	}
	future, err := c.LeaseHistory(ctx, HistoryFilter{Since: time.Now().Add(time.Hour)})
	if err != nil || len(future) != 0 {
		t.Fatalf("since the future: %+v %v", future, err)
	}
	code, _, body := doRaw(t, hc, "GET", "/v1/lease/history", "")
	if code != 200 || !strings.Contains(string(body), `"lease_ts":`) || strings.Contains(string(body), `"Index"`) {
		t.Fatalf("history JSON: %d %s", code, body)
	}
	if code, ej, _ := doRaw(t, hc, "GET", "/v1/lease/history?event=nap", ""); code != 400 || !strings.Contains(ej.Message, "event") {
		t.Fatalf("bad event: %d %+v", code, ej)
	}

	// The metrics-only listener: /metrics and /healthz, nothing else.
	ms, err := ServeMetrics(n.Node, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	for path, want := range map[string]int{"/metrics": 200, "/healthz": 200, "/v1/state": 404, "/v1/lease/history": 404} {
		resp, err := http.Get("http://" + ms.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("metrics listener %s: %d, want %d", path, resp.StatusCode, want)
		}
		if path == "/metrics" && !strings.Contains(string(b), "baton_build_info") {
			t.Error("no baton_build_info")
		}
	}
	resp, err := http.Post("http://"+ms.Addr()+"/v1/lease/steal", "application/json", strings.NewReader(`{"reason":"x"}`))
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("steal on the metrics listener: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestMessage(t *testing.T) {
	for in, want := range map[string]string{
		"transfer: transfer: election: not the holder":                                  "transfer: not the holder",
		"submit: propose: transport: no leader (no quorum?): context deadline exceeded": "submit: propose: no leader (no quorum?)",
		"node: this device does not hold the lease":                                     "this device does not hold the lease",
		"read: connection reset":                                                        "read: connection reset",
		"release: intentlog: timed out waiting for apply: context deadline exceeded":    "release: timed out waiting for apply",
	} {
		if got := Message(errors.New(in)); got != want {
			t.Errorf("Message(%q) = %q, want %q", in, got, want)
		}
	}
	ae := &APIError{Status: 409, Code: CodeNotHolder, Message: "transfer: transfer: node: this device does not hold the lease"}
	if got := Message(fmt.Errorf("x: %w", ae)); got != "transfer: this device does not hold the lease" {
		t.Errorf("APIError: %q", got)
	}
	if !errors.Is(ae, node.ErrNotHolder) {
		t.Error("APIError does not unwrap")
	}
}
