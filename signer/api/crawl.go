package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/signer/acme"
	"github.com/batonhq/baton/signer/node"
)

// A relay crawls a host it was told about (com.atproto.sync.requestCrawl) and, after
// failed dials, marks it offline and stops until it is told again. A device serving
// the repository (--xrpc-addr) with relays to tell (--crawl) asks each to crawl at
// start, then asks the relay for its view of the host (com.atproto.sync.getHostStatus)
// once a CrawlConfig.Every and asks it to crawl again, with a backoff, while the relay
// does not report the host active (offline, idle, unknown to it).

// CrawlConfig configures a Crawler.
type CrawlConfig struct {
	// Relays are the relays' base URLs (https://relay.example).
	Relays []string
	// Hostname is the name the relays crawl (the DID document's PDS host): no scheme,
	// no port.
	Hostname string
	// Every is how often a relay is asked for its view (default DefaultCrawlEvery).
	Every time.Duration
	// Backoff is the first wait between two requestCrawl to one relay while it does not
	// report the host active; it doubles up to MaxBackoff (defaults 1 min, 30 min).
	Backoff, MaxBackoff time.Duration
	Client              *http.Client // default: a client with a 10 s timeout
	Logger              *slog.Logger
}

// DefaultCrawlEvery is CrawlConfig.Every's default.
const DefaultCrawlEvery = time.Minute

// ValidateCrawl checks relay URLs and a hostname as CrawlConfig takes them.
func ValidateCrawl(relays []string, hostname string) error {
	if len(relays) == 0 {
		return fmt.Errorf("%w: no relay to tell", node.ErrBadConfig)
	}
	for _, r := range relays {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("%w: relay %q: want a base URL like https://relay.example", node.ErrBadConfig, r)
		}
	}
	// The name rule is the certificate's (acme.CheckHost); relays crawl only a dotted
	// public name, not localhost.
	if acme.CheckHost(hostname) != nil || !strings.Contains(hostname, ".") {
		return fmt.Errorf("%w: public host %q: the name relays crawl, as the DID document names it (pds.example.com: no scheme, no port, not an IP address)", node.ErrBadConfig, hostname)
	}
	return nil
}

// RelayView is what this device knows of one relay's view of the host.
type RelayView struct {
	Relay string `json:"relay"`
	// Status is the relay's answer to getHostStatus (active, idle, offline,
	// throttled, banned), "not_found" when it does not know the host, or "" before it
	// was asked or when it could not be (Err).
	Status    string    `json:"status,omitempty"`
	Seq       int64     `json:"seq,omitempty"` // the last event seq the relay has from the host
	Asked     time.Time `json:"asked,omitempty"`
	Requested time.Time `json:"crawl_requested,omitempty"` // the last requestCrawl it accepted
	Requests  int       `json:"crawl_requests"`
	Err       string    `json:"error,omitempty"`
}

// Crawler tells relays to crawl the host and keeps telling them.
type Crawler struct {
	cfg    CrawlConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	views  map[string]*RelayView
}

// StartCrawler validates cfg and starts telling its relays, until Close.
func StartCrawler(cfg CrawlConfig) (*Crawler, error) {
	if err := ValidateCrawl(cfg.Relays, cfg.Hostname); err != nil {
		return nil, err
	}
	if cfg.Every < 0 || cfg.Backoff < 0 || cfg.MaxBackoff < 0 {
		return nil, fmt.Errorf("%w: crawl: a negative interval", node.ErrBadConfig)
	}
	cfg.Every = cmp.Or(cfg.Every, DefaultCrawlEvery)
	cfg.Backoff = cmp.Or(cfg.Backoff, time.Minute)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 30*time.Minute)
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Crawler{cfg: cfg, cancel: cancel, views: map[string]*RelayView{}}
	for _, r := range cfg.Relays {
		r = strings.TrimRight(r, "/")
		c.views[r] = &RelayView{Relay: r}
		c.wg.Go(func() { c.tell(ctx, r) })
	}
	return c, nil
}

// Close stops telling the relays.
func (c *Crawler) Close() {
	c.cancel()
	c.wg.Wait()
}

// Views returns each relay's view of the host, in the configured order.
func (c *Crawler) Views() []RelayView {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]RelayView, 0, len(c.views))
	for _, v := range c.views {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b RelayView) int {
		return slices.Index(c.cfg.Relays, a.Relay) - slices.Index(c.cfg.Relays, b.Relay)
	})
	return out
}

func (c *Crawler) update(relay string, f func(v *RelayView)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c.views[relay])
}

// tell asks relay to crawl at once, then watches its view and asks again, with a
// backoff, while it does not report the host active.
func (c *Crawler) tell(ctx context.Context, relay string) {
	backoff := c.cfg.Backoff
	var next time.Time // when a requestCrawl may be sent again (zero: now)
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	for first := true; ; first = false {
		active := false
		if !first {
			status, seq, err := c.hostStatus(ctx, relay)
			active = status == "active"
			c.update(relay, func(v *RelayView) {
				v.Asked, v.Status, v.Seq, v.Err = time.Now(), status, seq, errText(err)
			})
			if active {
				backoff, next = c.cfg.Backoff, time.Time{}
			}
		}
		if !active && !time.Now().Before(next) {
			err := c.requestCrawl(ctx, relay)
			c.update(relay, func(v *RelayView) {
				v.Err = errText(err)
				if err == nil {
					v.Requested, v.Requests = time.Now(), v.Requests+1
				}
			})
			if err != nil && ctx.Err() == nil {
				c.cfg.Logger.Warn("a relay refused or missed the request to crawl this host", "relay", relay, "host", c.cfg.Hostname, "err", err)
			} else if err == nil {
				c.cfg.Logger.Info("asked a relay to crawl this host", "relay", relay, "host", c.cfg.Hostname)
			}
			if !first {
				next = time.Now().Add(backoff)
				backoff = min(2*backoff, c.cfg.MaxBackoff)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// requestCrawl posts com.atproto.sync.requestCrawl {hostname} to relay.
func (c *Crawler) requestCrawl(ctx context.Context, relay string) error {
	body, _ := json.Marshal(map[string]string{"hostname": c.cfg.Hostname})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, relay+"/xrpc/com.atproto.sync.requestCrawl", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("requestCrawl: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// hostStatus asks relay for its view of the host (com.atproto.sync.getHostStatus):
// its status, "not_found" when the relay does not know it.
func (c *Crawler) hostStatus(ctx context.Context, relay string) (string, int64, error) {
	u := relay + "/xrpc/com.atproto.sync.getHostStatus?hostname=" + url.QueryEscape(c.cfg.Hostname)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), "HostNotFound") {
		return "not_found", 0, nil
	}
	if resp.StatusCode/100 != 2 {
		return "", 0, fmt.Errorf("getHostStatus: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var out struct {
		Status string `json:"status"`
		Seq    int64  `json:"seq"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", 0, fmt.Errorf("getHostStatus: %w", err)
	}
	return out.Status, out.Seq, nil
}
