package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

// publicDo sends one request to the public listener at addr (no token unless h has
// one) and returns the status and the body.
func publicDo(t *testing.T, method, url string, h http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestXRPCPublic: the public listener (Config.XRPCAddr) on a real atproto node
// answers the read-only XRPC methods without a token, subscribeRepos included, and
// nothing else: /v1/, /metrics and /healthz are 404 (with a valid token too), a POST
// on a method is 405, a write method is not served. Its starvation rules are the TCP
// API's (slowloris and idle keep-alive floods, small numbers), on a guard of its own:
// the authenticated TCP API beside it answers throughout.
func TestXRPCPublic(t *testing.T) {
	n, key := startAtprotoHolder(t, Config{Addr: "127.0.0.1:0", Token: testToken, XRPCAddr: "127.0.0.1:0", MaxConns: 8, MaxStreams: 1})
	atSubmit(t, n, intentlog.Intent{ID: "p1", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3kp1", Value: atRecord(t, "one")})
	did := key.DID()
	pub := "http://" + n.srv.XRPCAddr()
	if n.srv.XRPCAddr() == "" || n.srv.XRPCAddr() == n.srv.Addr() {
		t.Fatalf("public listener at %q, API at %q", n.srv.XRPCAddr(), n.srv.Addr())
	}

	for _, p := range []string{
		"/xrpc/com.atproto.sync.getLatestCommit?did=" + did,
		"/xrpc/com.atproto.sync.getRepo?did=" + did,
		"/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=app.bsky.feed.post&rkey=3kp1",
		"/xrpc/com.atproto.repo.getRecord?repo=" + did + "&collection=app.bsky.feed.post&rkey=3kp1",
	} {
		if st, body := publicDo(t, http.MethodGet, pub+p, nil); st != http.StatusOK {
			t.Errorf("GET %s without a token: %d %.200s", p, st, body)
		}
	}
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/state", 404, CodeNotFound},
		{"GET", "/v1/records", 404, CodeNotFound},
		{"POST", "/v1/intents", 404, CodeNotFound},
		{"POST", "/v1/lease/steal", 404, CodeNotFound},
		{"GET", "/metrics", 404, CodeNotFound},
		{"GET", "/healthz", 404, CodeNotFound},
		{"GET", "/", 404, CodeNotFound},
		{"POST", "/xrpc/com.atproto.sync.getLatestCommit?did=" + did, 405, CodeMethod},
		{"POST", "/xrpc/com.atproto.repo.createRecord", 501, XRPCNotImplemented},
		{"GET", "/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=app.bsky.feed.post&rkey=3knone", 400, XRPCRecordNotFound},
	} {
		for _, h := range []http.Header{nil, {"Authorization": {"Bearer " + testToken}}} {
			st, body := publicDo(t, tc.method, pub+tc.path, h)
			if st != tc.status || !strings.Contains(body, `"error":"`+tc.code+`"`) {
				t.Errorf("%s %s (token %v): %d %.200s, want %d %s", tc.method, tc.path, h != nil, st, body, tc.status, tc.code)
			}
		}
	}

	// subscribeRepos without a token, capped by the listener's own MaxStreams (1):
	// the TCP API's stream slot stays free.
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, _, err := d.Dial("ws://"+n.srv.XRPCAddr()+"/xrpc/com.atproto.sync.subscribeRepos?cursor=0", nil)
	if err != nil {
		t.Fatalf("subscribeRepos on the public listener: %v", err)
	}
	defer c.Close()
	if xe := parseFrames(t, readFrames(t, c, 1))[0]; xe.RepoCommit == nil || xe.RepoCommit.Seq != 1 {
		t.Fatalf("public stream: %+v", xe)
	}
	if _, resp, _ := d.Dial("ws://"+n.srv.XRPCAddr()+"/xrpc/com.atproto.sync.subscribeRepos?cursor=0", nil); resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second public stream past MaxStreams 1: %+v", resp)
	}
	c2, _, err := d.Dial("ws://"+n.srv.Addr()+"/xrpc/com.atproto.sync.subscribeRepos?cursor=0", http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatalf("a stream on the TCP API beside a full public listener: %v", err)
	}
	c2.Close()

	latest := pub + "/xrpc/com.atproto.sync.getLatestCommit?did=" + did
	t.Run("slowloris", func(t *testing.T) {
		// 40 connections (MaxConns 8) that send a partial header, reopened every 2 s,
		// for at most 6 s; a request without a token gets through every second.
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
		defer cancel()
		defer slowloris(ctx, n.srv.XRPCAddr(), 40, 2*time.Second)()
		defer cancel()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for range 3 {
			<-tick.C
			servedWithin(t, latest, nil, 5*time.Second)
			authedWithin(t, n.srv.Addr(), 5*time.Second)
		}
	})
	t.Run("idle_keepalive", func(t *testing.T) {
		// 40 keep-alive connections (MaxConns 8), each left idle after one request.
		idleKeepalive(t, n.srv.XRPCAddr(), 40, "GET /xrpc/com.atproto.sync.getLatestCommit?did="+did+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if took := servedWithin(t, latest, nil, 5*time.Second); took > 5*time.Second {
			t.Fatalf("a request behind 40 idle connections took %v", took)
		}
	})
}

// TestXRPCPublicNotAtproto: Start refuses a public listener on a chain in baton's own
// format, saying why, and opens no listener.
func TestXRPCPublicNotAtproto(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 1))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{})
	_, err := Start(n.Node, Config{XRPCAddr: "127.0.0.1:0", Logger: testutil.Logger(t)})
	if !errors.Is(err, node.ErrBadConfig) || !strings.Contains(err.Error(), "atproto") {
		t.Fatalf("a public xrpc listener on a baton chain: %v", err)
	}
}
