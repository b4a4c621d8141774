package api

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

// Operator endpoints: peers, lease watch and campaign, the filtered lease history,
// and a metrics-only listener.

// MaxCampaignWait bounds one POST /v1/lease/campaign (a client waiting longer asks
// again): below the server's WriteTimeout.
const MaxCampaignWait = 30 * time.Second

// CampaignJSON answers POST /v1/lease/campaign.
type CampaignJSON struct {
	Held  bool            `json:"held"`
	Lease node.LeaseState `json:"lease"`
}

func (a *Server) routeOps() {
	a.route("/v1/peers", handlers{http.MethodGet: a.getPeers})
	a.routeQ("/v1/lease/watch", handlers{http.MethodGet: a.getLeaseWatch}, true)
	a.routeQ("/v1/lease/campaign", handlers{http.MethodPost: a.postCampaign}, true)
	a.route("/v1/health/cluster", handlers{http.MethodGet: a.getClusterHealth})
	a.route("/v1/relays", handlers{http.MethodGet: a.getRelays})
	a.route("/v1/public", handlers{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.publicView())
	}})
}

// getRelays answers each relay's view of this host ({"relays": []} when none is told:
// baton run --crawl).
func (a *Server) getRelays(w http.ResponseWriter, r *http.Request) {
	views := []RelayView{}
	if a.crawl != nil {
		views = a.crawl.Views()
	}
	writeJSON(w, http.StatusOK, map[string]any{"host": a.crawlHost(), "relays": views})
}

func (a *Server) crawlHost() string {
	if a.cfg.Crawl == nil {
		return ""
	}
	return a.cfg.Crawl.Hostname
}

// ClusterHealthWait bounds how long GET /v1/health/cluster waits for the members'
// answers: one that has not answered by then is reported unreachable.
const ClusterHealthWait = 3 * time.Second

// ClusterHealth is the answer of GET /v1/health/cluster.
type ClusterHealth struct {
	// Healthy: every member answered and is healthy.
	Healthy bool                `json:"healthy"`
	Members []node.MemberHealth `json:"members"`
}

func (a *Server) getClusterHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := apiCtx(r, ClusterHealthWait)
	defer cancel()
	ms, err := a.n.ClusterHealth(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	ans := ClusterHealth{Healthy: len(ms) > 0, Members: ms}
	for _, m := range ms {
		ans.Healthy = ans.Healthy && m.Healthy
	}
	writeJSON(w, http.StatusOK, ans)
}

func (a *Server) getPeers(w http.ResponseWriter, r *http.Request) {
	ps, err := a.n.Peers()
	if err != nil {
		writeError(w, err)
		return
	}
	if ps == nil {
		ps = []node.PeerState{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"peers": ps, "quorum": a.n.State().Quorum})
}

// getLeaseWatch streams node.LeaseChange lines as NDJSON (?renewals=1 adds renewals)
// until the client goes or the server closes.
func (a *Server) getLeaseWatch(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "renewals")
	if err != nil {
		writeError(w, err)
		return
	}
	renewals, err := boolParam(q, "renewals")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(a.base, cancel)()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	for c := range a.n.WatchLease(ctx, renewals) {
		_ = rc.SetWriteDeadline(time.Now().Add(writeSlice))
		if err := enc.Encode(c); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// postCampaign waits (?wait=DURATION, default MaxCampaignWait; a longer wait is refused
// with 400, never cut short) until this device holds the lease: 200 {held: true,
// lease}; 504 timeout otherwise, naming the holder.
func (a *Server) postCampaign(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "wait")
	if err != nil {
		writeError(w, err)
		return
	}
	wait := MaxCampaignWait
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			writeError(w, fmt.Errorf("%w: wait=%q: want a positive duration", node.ErrBadRequest, s))
			return
		}
		if d > MaxCampaignWait {
			// Refused, not cut short: a client asking for 60 s must not get a
			// timeout at 30 s it cannot tell from the lease staying held.
			writeError(w, fmt.Errorf("%w: wait=%s is more than one request may wait (%s): ask again after each answer (the Go client's Campaign does)", node.ErrBadRequest, d, MaxCampaignWait))
			return
		}
		wait = d
	}
	var req struct{}
	if err := decodeBody(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, wait)
	defer cancel()
	if _, err := a.n.Campaign(ctx); err != nil {
		if errors.Is(err, node.ErrTimeout) {
			// Say what it waited for and who holds the lease.
			l := a.n.State().Lease
			held := "nobody holds it (free: this device's signer loop claims it at its next tick)"
			if l.Holder != "" {
				held = fmt.Sprintf("held by %s at epoch %d", l.Holder, l.Epoch)
				if l.ExpiresInMs > 0 {
					held += fmt.Sprintf(", claimable by this device in %s if not renewed", (time.Duration(l.ExpiresInMs) * time.Millisecond).Round(time.Millisecond))
				}
			}
			err = fmt.Errorf("%w: this device did not get the lease within wait=%s; the lease is %s", node.ErrTimeout, wait, held)
		}
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, CampaignJSON{Held: true, Lease: a.n.State().Lease})
}

func boolParam(q url.Values, name string) (bool, error) {
	switch s := q.Get(name); s {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s=%q: want 1 or 0", node.ErrBadRequest, name, s)
	}
}

// HistoryFilter selects lease history events (GET /v1/lease/history?event=&since=).
type HistoryFilter struct {
	// Events keeps only these events (claim, renew, release, transfer, steal); empty:
	// all.
	Events []string
	// Since keeps events at or after this Raft index... or time: events whose time
	// is known and not before Since (zero: no bound).
	Since time.Time
}

func (f HistoryFilter) query() string {
	q := url.Values{}
	if len(f.Events) > 0 {
		q.Set("event", strings.Join(f.Events, ","))
	}
	if !f.Since.IsZero() {
		q.Set("since", strconv.FormatInt(f.Since.UnixMilli(), 10))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

var historyEvents = []string{"claim", "renew", "release", "transfer", "steal"}

func parseHistoryFilter(r *http.Request) (HistoryFilter, error) {
	q, err := query(r, "event", "since")
	if err != nil {
		return HistoryFilter{}, err
	}
	var f HistoryFilter
	if s := q.Get("event"); s != "" {
		for _, e := range strings.Split(s, ",") {
			e = strings.TrimSpace(e)
			ok := false
			for _, k := range historyEvents {
				ok = ok || k == e
			}
			if !ok {
				return f, fmt.Errorf("%w: event %q: want %s", node.ErrBadRequest, e, strings.Join(historyEvents, ", "))
			}
			f.Events = append(f.Events, e)
		}
	}
	if s := q.Get("since"); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t, terr := time.Parse(time.RFC3339, s)
			if terr != nil {
				return f, fmt.Errorf("%w: since=%q: want unix milliseconds or RFC 3339", node.ErrBadRequest, s)
			}
			f.Since = t
		} else {
			f.Since = time.UnixMilli(ms)
		}
	}
	return f, nil
}

func (f HistoryFilter) keep(e LeaseEventJSON) bool {
	if len(f.Events) > 0 {
		ok := false
		for _, k := range f.Events {
			ok = ok || k == e.Event
		}
		if !ok {
			return false
		}
	}
	if !f.Since.IsZero() {
		ts := e.TS
		if ts == 0 {
			ts = e.LeaseTS // a release: the time is not known, at most its record's
		}
		if time.UnixMilli(ts).Before(f.Since) {
			return false
		}
	}
	return true
}

// leaseEventJSON is the API form of a history entry. A release entry carries no
// time of its own: its TS is 0 and LeaseTS the record's ts (the last renewal's).
func leaseEventJSON(e intentlog.LeaseEvent) LeaseEventJSON {
	j := LeaseEventJSON{Index: e.Index, Event: e.Event, Holder: e.Holder, Epoch: e.Epoch, TS: e.TS, LeaseTS: e.TS,
		Prior: e.Prior, Reason: e.Reason}
	if e.Event == "release" {
		j.TS = 0
	}
	return j
}

// ----- a metrics-only listener -----

// MetricsServer serves only GET /metrics and GET /healthz of a node, on its own TCP
// address, never the write API: it is safe to expose to a Prometheus server.
type MetricsServer struct {
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

// ServeMetrics listens on addr (host:port) and serves n's metrics and health.
func ServeMetrics(n *node.Node, addr string, logger *slog.Logger) (*MetricsServer, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: metrics address %q: %w", node.ErrBadConfig, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(n.Registry(), promhttp.HandlerOpts{})
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-n.Done():
			writeError(w, node.ErrStopped)
			return
		default:
		}
		if err := n.Health(); err != nil { // as the API's /healthz: 503 unhealthy
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": n.ID()})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: this listener serves only GET /metrics and GET /healthz", node.ErrNotFound))
	})
	m := &MetricsServer{addr: ln.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout: ReadTimeout, WriteTimeout: ReadTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := m.srv.Serve(limitListener(ln, DefaultMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics server stopped", "addr", m.addr, "err", err)
		}
	}()
	return m, nil
}

// Addr returns the address the metrics server listens on.
func (m *MetricsServer) Addr() string { return m.addr }

// Close stops the metrics server.
func (m *MetricsServer) Close() {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		_ = m.srv.Close()
	}
	m.wg.Wait()
}

// ----- client -----

// Peers returns every member with its reachability, and the quorum (GET /v1/peers).
func (c *Client) Peers(ctx context.Context) ([]node.PeerState, node.QuorumState, error) {
	var out struct {
		Peers  []node.PeerState `json:"peers"`
		Quorum node.QuorumState `json:"quorum"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/peers", nil, &out)
	return out.Peers, out.Quorum, err
}

// Campaign waits until the node holds the lease or ctx ends (POST
// /v1/lease/campaign, asked again every MaxCampaignWait).
func (c *Client) Campaign(ctx context.Context) (node.LeaseState, error) {
	for {
		var out CampaignJSON
		wait := MaxCampaignWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		err := c.call(ctx, http.MethodPost, "/v1/lease/campaign?wait="+wait.String(), struct{}{}, &out)
		if err == nil {
			return out.Lease, nil
		}
		if !errors.Is(err, node.ErrTimeout) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return node.LeaseState{}, fmt.Errorf("%w: %w", node.ErrTimeout, ctx.Err())
			}
			return node.LeaseState{}, err
		}
	}
}

// WatchLease streams lease changes (GET /v1/lease/watch). The channel closes when
// the stream ends or ctx is done; the error (nil after ctx ended) is sent on errc.
func (c *Client) WatchLease(ctx context.Context, renewals bool) (<-chan node.LeaseChange, <-chan error) {
	ch := make(chan node.LeaseChange)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		path := "/v1/lease/watch"
		if renewals {
			path += "?renewals=1"
		}
		resp, err := c.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			errc <- ctxErr(ctx, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 4096), 1<<20)
		for sc.Scan() {
			var lc node.LeaseChange
			if err := json.Unmarshal(sc.Bytes(), &lc); err != nil {
				errc <- fmt.Errorf("lease watch: %w", err)
				return
			}
			select {
			case ch <- lc:
			case <-ctx.Done():
				errc <- nil
				return
			}
		}
		err = sc.Err()
		if err == nil {
			err = fmt.Errorf("lease watch: %w", io.ErrUnexpectedEOF) // the node went away
		}
		errc <- ctxErr(ctx, err)
	}()
	return ch, errc
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// CertificateView is what the public listener's certificate says (GET /v1/public).
type CertificateView struct {
	Names    []string  `json:"names,omitempty"`
	Issuer   string    `json:"issuer,omitempty"`
	NotAfter time.Time `json:"not_after,omitempty"`
	Err      string    `json:"error,omitempty"` // no certificate to show, and why
}

// PublicView is the public listener as GET /v1/public answers it.
type PublicView struct {
	Addr        string           `json:"addr,omitempty"` // "" when this device serves no public listener
	Host        string           `json:"host,omitempty"`
	TLS         bool             `json:"tls"`
	Certificate *CertificateView `json:"certificate,omitempty"`
}

// publicView describes the public listener now.
func (a *Server) publicView() PublicView {
	v := PublicView{Addr: a.xrpc, Host: cmp.Or(a.cfg.PublicHost, a.crawlHost()), TLS: a.cfg.XRPCTLS != nil}
	if f := a.cfg.XRPCCertificate; f != nil {
		cv := &CertificateView{}
		if leaf, err := f(); err != nil {
			cv.Err = err.Error()
		} else {
			cv.Names, cv.Issuer, cv.NotAfter = leaf.DNSNames, leaf.Issuer.CommonName, leaf.NotAfter
		}
		v.Certificate = cv
	}
	return v
}
