package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// fakeRelay answers requestCrawl and getHostStatus as indigo's relay does, with a
// status the test sets (a unit-test fake: the real relay runs in testnet's tests).
type fakeRelay struct {
	mu       sync.Mutex
	status   string // "" : HostNotFound (404)
	requests []string
}

func (f *fakeRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/xrpc/com.atproto.sync.requestCrawl":
		var in struct{ Hostname string }
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, `{"error":"InvalidRequest"}`, 400)
			return
		}
		f.requests = append(f.requests, in.Hostname)
		if f.status == "" || f.status == "offline" {
			f.status = "active" // the relay crawls it
		}
	case "/xrpc/com.atproto.sync.getHostStatus":
		if f.status == "" {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":"HostNotFound","message":"host not found"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"hostname": r.URL.Query().Get("hostname"), "status": f.status, "seq": 7})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeRelay) state() (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, len(f.requests)
}

func (f *fakeRelay) set(status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = status
}

// TestCrawlerTellsRelaysAgain (issue 40 item 2): a serving device asks each relay to
// crawl it at start, follows the relay's view, and asks again (with a backoff) once the
// relay reports the host offline, as indigo's relay does after failed dials and then
// never returns by itself.
func TestCrawlerTellsRelaysAgain(t *testing.T) {
	f := &fakeRelay{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := StartCrawler(CrawlConfig{Relays: []string{srv.URL}, Hostname: "pds.example.com",
		Every: 20 * time.Millisecond, Backoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.WaitFor(t, 10*time.Second, "the first requestCrawl and an active view", func() bool {
		v := c.Views()
		_, n := f.state()
		return n == 1 && len(v) == 1 && v[0].Status == "active" && v[0].Seq == 7
	})
	time.Sleep(100 * time.Millisecond) // several polls while active: no more requests (a window, not synchronisation)
	if _, n := f.state(); n != 1 {
		t.Fatalf("%d requestCrawl while the relay reported the host active", n)
	}
	f.set("offline") // the relay gave up on the host after failed dials
	// The relay counts the request when it arrives; the crawler's view, once the answer
	// is back (CI under load read the view in between: Requests 1).
	testutil.WaitFor(t, 10*time.Second, "a requestCrawl after the relay reported offline, in the crawler's view", func() bool {
		st, n := f.state()
		v := c.Views()[0]
		return n == 2 && st == "active" && v.Requests == 2 && !v.Requested.IsZero()
	})
	for _, bad := range []struct {
		relays []string
		host   string
	}{
		{nil, "pds.example.com"}, {[]string{"relay.example"}, "pds.example.com"}, {[]string{"https://r.example/x"}, "pds.example.com"},
		{[]string{"https://r.example"}, "pds.example.com:443"}, {[]string{"https://r.example"}, "https://pds.example.com"}, {[]string{"https://r.example"}, "localhost"},
	} {
		if err := ValidateCrawl(bad.relays, bad.host); err == nil {
			t.Errorf("%v %q accepted", bad.relays, bad.host)
		}
	}
}
