package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
)

// servedWithin polls, with a fresh connection each time, until GET url (with the
// headers h) answers 200, and fails the test if that takes longer than limit. The
// limit is loose (a loaded two-core machine); the starvation it guards against took
// 9 s to 70 s and more.
func servedWithin(t *testing.T, url string, h http.Header, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last error
	err := wait.For(limit, "a request succeeds", func() bool {
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			last = err
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		last = fmt.Errorf("status %d", resp.StatusCode)
		return resp.StatusCode == 200
	})
	if err != nil {
		t.Fatalf("GET %s: %v (last: %v)", url, err, last)
	}
	return time.Since(start)
}

// authedWithin is servedWithin for an authenticated GET /healthz on the TCP API.
func authedWithin(t *testing.T, addr string, limit time.Duration) time.Duration {
	t.Helper()
	return servedWithin(t, "http://"+addr+"/healthz", http.Header{"Authorization": {"Bearer " + testToken}}, limit)
}

// slowloris runs conns connections to addr that each send a partial request header
// and nothing more, reopened every reopen, until ctx ends; the returned function
// waits until they are closed.
func slowloris(ctx context.Context, addr string, conns int, reopen time.Duration) (wait func()) {
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x%d\r\nX-Slow: ", i)
				}
				select {
				case <-ctx.Done():
				case <-time.After(reopen):
				}
				if c != nil {
					c.Close()
				}
			}
		}()
	}
	return wg.Wait
}

// idleKeepalive opens n connections to addr that each send the whole request req
// (raw HTTP/1.1, keep-alive) and read its answer, then stay open and idle until the
// test ends.
func idleKeepalive(t *testing.T, addr string, n int, req string) {
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			fmt.Fprint(c, req)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			_ = c.SetDeadline(time.Time{})
		}()
	}
	wg.Wait()
}

// TestTCPAPIStarvation: peers without the token cannot hold what authenticated
// clients need on the TCP listener (issue 19, item 3), measured with the issue's
// clients, on 127.0.0.1.
func TestTCPAPIStarvation(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 3))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{Addr: "127.0.0.1:0", Token: testToken})
	addr := n.srv.Addr()
	authedWithin(t, addr, 10*time.Second) // up

	t.Run("slowloris", func(t *testing.T) {
		// 120 connections that send a partial request header and nothing more,
		// reopened every 4 s, for at most 12 s.
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
		defer cancel()
		defer slowloris(ctx, addr, 120, 4*time.Second)()
		defer cancel()
		// Ask once a second for 6 s: across the attack's first reopening.
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for range 6 {
			<-tick.C
			authedWithin(t, addr, 5*time.Second)
		}
	})

	t.Run("idle_keepalive", func(t *testing.T) {
		// 300 authenticated keep-alive connections, each after one request left idle.
		idleKeepalive(t, addr, 300, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+"\r\n\r\n")
		if took := authedWithin(t, addr, 5*time.Second); took > 5*time.Second {
			t.Fatalf("authenticated request behind 300 idle connections took %v", took)
		}
	})

	t.Run("oversized", func(t *testing.T) {
		// A 3 MiB body and a 100 KiB URL get JSON 413 and 414, not a reset.
		for _, tc := range []struct {
			name, head string
			body       []byte
			want       string
		}{
			{"3MiB body", "POST /v1/intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
				"\r\nContent-Type: application/json\r\nContent-Length: 3145728\r\n\r\n", bytes.Repeat([]byte("a"), 3<<20), "413"},
			{"100KiB URL", "GET /v1/records?prefix=" + strings.Repeat("a", 100<<10) + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
				testToken + "\r\n\r\n", nil, "414"},
		} {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() { // like curl: send it all, whatever the server does meanwhile
				_, _ = c.Write([]byte(tc.head))
				_, _ = c.Write(tc.body)
			}()
			resp, err := io.ReadAll(c)
			c.Close()
			if !bytes.HasPrefix(resp, []byte("HTTP/1.1 "+tc.want)) || !bytes.Contains(resp, []byte(`"error":"too_large"`)) {
				t.Fatalf("%s: answer %.200q, err %v; want a JSON %s", tc.name, resp, err, tc.want)
			}
		}
	})
}
