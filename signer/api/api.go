package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

// API limits and timeouts.
const (
	// MaxRequestBody bounds every request body: one intent with the largest value,
	// base64-encoded, plus its id and path.
	MaxRequestBody = 2 << 20
	// DefaultAPITimeout bounds lease and membership calls made through the API.
	DefaultAPITimeout = 10 * time.Second
	// MaxRecordsLimit bounds one GET /v1/records answer.
	MaxRecordsLimit = 10000
)

// IntentRequest is the body of POST /v1/intents. Value is base64 in JSON.
type IntentRequest struct {
	ID    string `json:"id"`
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value []byte `json:"value,omitempty"`
}

// RecordJSON is one record in API answers. Value is base64 in JSON.
type RecordJSON struct {
	Path  string `json:"path"`
	Value []byte `json:"value"`
}

// CommitJSON is one NDJSON line of GET /v1/commits.
type CommitJSON struct {
	Seq    uint64 `json:"seq"`
	Hash   string `json:"hash"`
	Epoch  uint64 `json:"epoch"`
	Signer string `json:"signer"`
	CBOR   []byte `json:"cbor"` // base64 of the full encoding
}

// LeaseEventJSON is one line of the lease history.
type LeaseEventJSON struct {
	Index  uint64 `json:"index"`
	Event  string `json:"event"`
	Holder string `json:"holder"`
	Epoch  uint64 `json:"epoch"`
	// TS is the event's own time (unix ms), absent for a release, whose entry carries
	// none; LeaseTS is the lease record's ts after the event (for a release: the last
	// renewal's).
	TS      int64  `json:"ts,omitempty"`
	LeaseTS int64  `json:"lease_ts"`
	Prior   string `json:"prior,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// MemberJSON is one Raft member in API answers.
type MemberJSON struct {
	ID     string   `json:"id"`
	Voter  bool     `json:"voter"`
	Leader bool     `json:"leader"`
	Addrs  []string `json:"addrs,omitempty"`
}

// AddMemberRequest is the body of POST /v1/members.
type AddMemberRequest struct {
	Addr     string `json:"addr"`
	NonVoter bool   `json:"nonvoter,omitempty"`
}

type transferRequest struct {
	To string `json:"to"`
	// Forward: when this device does not hold the lease, ask the holder (at the epoch
	// this device sees) instead of answering not_holder.
	Forward bool `json:"forward,omitempty"`
}

type releaseRequest struct {
	Forward bool `json:"forward,omitempty"`
}

type stealRequest struct {
	Reason string `json:"reason"`
}

type errorJSON struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// SocketFile is the API socket's name inside a data directory.
const SocketFile = "baton.sock"

// Config configures Start. At least one of Socket, Addr and XRPCAddr is needed.
type Config struct {
	// Socket is the Unix socket to serve on (mode 0600; a stale socket file left by a
	// dead process is replaced, one a live process serves is refused with
	// node.ErrSocketInUse). Empty: none.
	Socket string
	// Addr is an optional TCP listen address (host:port). A TCP listener always
	// requires Token: any local user can reach a loopback port.
	Addr string
	// Token is the bearer token required on the TCP listener (and accepted on the
	// socket). Required with Addr; at least MinTokenLen bytes.
	Token string
	// TLS, when set, makes the TCP listener (Addr) serve HTTPS with it. Required when
	// Addr is not a loopback address: the bearer token would cross the network in
	// clear.
	TLS *tls.Config
	// XRPCTLS, when set, makes the public XRPC listener (XRPCAddr) serve HTTPS with it:
	// relays crawl only hosts with TLS. Optional (a TLS proxy in front does as well).
	XRPCTLS *tls.Config
	// XRPCAddr is an optional public, read-only TCP listen address (host:port): it
	// serves only the read-only /xrpc/ methods of an atproto chain's repository
	// (xrpc.go), without a token, so that a relay can crawl it; every other path is
	// 404. It has its own connection limits (the TCP listener's rules, conns.go) and
	// its own MaxConns and MaxStreams, so its peers cannot starve the API. Start
	// refuses it on a chain that is not atproto (CheckXRPCChain).
	XRPCAddr string
	// MaxConns bounds the open connections of each listener (the socket's, the TCP
	// one's and the public XRPC one's are counted apart, so TCP clients cannot starve
	// the socket, nor public ones the API).
	// Optional, default DefaultMaxConns.
	MaxConns int
	// MaxStreams bounds the open subscribeRepos streams of each listener (see
	// xrpc_stream.go). Optional, default MaxConns/4 (at least 1); on the socket, whose
	// streams keep their connection slots, at most MaxConns-1 (when MaxConns > 1).
	MaxStreams int
	// Crawl, with XRPCAddr, tells relays to crawl the repository and keeps telling them
	// (crawl.go); its Logger defaults to Logger. Optional.
	Crawl *CrawlConfig
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	streamWrite time.Duration // a stream's write timeout (default writeSlice; tests)
	streamLag   uint64        // DefaultStreamMaxLag (tests)
}

// listenerTLS is the TLS configuration of a listener kind (nil: plain).
func (a *Server) listenerTLS(kind listenerKind) *tls.Config {
	switch kind {
	case onTCP:
		return a.cfg.TLS
	case onPublic:
		return a.cfg.XRPCTLS
	}
	return nil
}

// loopbackHost reports whether host (of a listen address) is a loopback one:
// localhost or a loopback IP. An empty host listens on every interface.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Validate checks the config (Start calls it) and fills in defaults.
func (c *Config) Validate() error {
	if c.Socket == "" && c.Addr == "" && c.XRPCAddr == "" {
		return fmt.Errorf("%w: api: neither a socket nor a TCP address", node.ErrBadConfig)
	}
	if c.Crawl != nil {
		if c.XRPCAddr == "" {
			return fmt.Errorf("%w: relays to tell (crawl) but no public xrpc address to crawl", node.ErrBadConfig)
		}
		if err := ValidateCrawl(c.Crawl.Relays, c.Crawl.Hostname); err != nil {
			return err
		}
	}
	if c.XRPCAddr != "" {
		if _, _, err := net.SplitHostPort(c.XRPCAddr); err != nil {
			return fmt.Errorf("%w: public xrpc address %q: %w", node.ErrBadConfig, c.XRPCAddr, err)
		}
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("%w: api address %q: %w", node.ErrBadConfig, c.Addr, err)
		}
		if c.Token == "" {
			return fmt.Errorf("%w: the TCP api at %s needs a bearer token (any local user can reach a loopback port)", node.ErrBadConfig, c.Addr)
		}
		if host, _, _ := net.SplitHostPort(c.Addr); c.TLS == nil && !loopbackHost(host) {
			return fmt.Errorf("%w: the TCP api at %s would send its bearer token in clear over the network: "+
				"give it a certificate (baton run --api-tls-cert FILE --api-tls-key FILE; clients then use https://), "+
				"or bind a loopback address (127.0.0.1:PORT) and reach it through SSH or a TLS proxy", node.ErrBadConfig, c.Addr)
		}
	}
	if c.Token != "" && len(c.Token) < MinTokenLen {
		return fmt.Errorf("%w: api token of %d bytes, want at least %d", node.ErrBadConfig, len(c.Token), MinTokenLen)
	}
	if c.MaxConns < 0 {
		return fmt.Errorf("%w: negative MaxConns", node.ErrBadConfig)
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxStreams < 0 {
		return fmt.Errorf("%w: negative MaxStreams", node.ErrBadConfig)
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = max(1, c.MaxConns/4)
	}
	if c.streamWrite == 0 {
		c.streamWrite = writeSlice
	}
	if c.streamLag == 0 {
		c.streamLag = DefaultStreamMaxLag
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Server serves a Node's local API. Close it before stopping the node.
type Server struct {
	n       *node.Node
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	base    context.Context // cancelled when the node stops or the server closes
	cancel  context.CancelFunc
	mu      sync.Mutex
	servers []*http.Server
	sock    string
	tcp     string // the TCP listener's address, if any
	xrpc    string // the public XRPC listener's address, if any
	crawl   *Crawler
	pub     *http.ServeMux
	wg      sync.WaitGroup

	events                              *eventSource  // subscribeRepos frames (xrpc_stream.go)
	sockStreams, tcpStreams, pubStreams chan struct{} // open streams per listener
}

// listenerKind says which listener a request arrived on (in its context: listenerKey).
type listenerKind int

const (
	onSocket listenerKind = iota
	onTCP                 // the TCP API, behind the bearer token
	onPublic              // the public read-only XRPC listener (Config.XRPCAddr)
)

func (k listenerKind) String() string {
	return [...]string{onSocket: "socket", onTCP: "tcp", onPublic: "public"}[k]
}

type listenerKey struct{}

// CheckXRPCChain refuses a public XRPC listener (Config.XRPCAddr) for the chain
// chainDID unless it is an atproto chain: a chain in baton's own format has no
// repository to serve.
func CheckXRPCChain(chainDID string) error {
	f, err := signer.ChainFormatOfDID(chainDID)
	if err != nil {
		return fmt.Errorf("%w: public xrpc listener: chain %s: %w", node.ErrBadConfig, chainDID, err)
	}
	if f != chain.FormatAtproto {
		return fmt.Errorf("%w: a public xrpc listener serves an atproto repository, and this chain (%s, an Ed25519 key) is in baton's own format: it has none", node.ErrBadConfig, chainDID)
	}
	return nil
}

// Start serves n's API on the listeners cfg names.
func Start(n *node.Node, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.XRPCAddr != "" {
		if err := CheckXRPCChain(n.Chain()); err != nil {
			return nil, err
		}
	}
	a := &Server{n: n, cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), pub: http.NewServeMux(),
		events:      &eventSource{log: n.Log(), trees: atproto.NewTreePool(eventTrees)},
		sockStreams: make(chan struct{}, min(cfg.MaxStreams, max(1, cfg.MaxConns-1))),
		tcpStreams:  make(chan struct{}, cfg.MaxStreams),
		pubStreams:  make(chan struct{}, cfg.MaxStreams)}
	a.base, a.cancel = context.WithCancel(context.Background())
	go func() {
		select {
		case <-n.Done():
			a.cancel()
		case <-a.base.Done():
		}
	}()
	a.routes()
	if p := cfg.Socket; p != "" {
		ln, err := listenSocket(p)
		if err != nil {
			a.cancel()
			return nil, err
		}
		a.sock = p
		a.serve(ln, onSocket)
	}
	for _, l := range []struct {
		addr  string
		bound *string
		kind  listenerKind
	}{{cfg.Addr, &a.tcp, onTCP}, {cfg.XRPCAddr, &a.xrpc, onPublic}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			a.Close(nil)
			return nil, fmt.Errorf("listen %s: %w", l.addr, err)
		}
		*l.bound = ln.Addr().String()
		a.serve(ln, l.kind)
	}
	if cfg.Crawl != nil {
		cc := *cfg.Crawl
		if cc.Logger == nil {
			cc.Logger = cfg.Logger
		}
		crawl, err := StartCrawler(cc) // once the repository is served
		if err != nil {
			a.Close(nil)
			return nil, err
		}
		a.crawl = crawl
	}
	return a, nil
}

// Socket returns the Unix socket path ("" when none).
func (a *Server) Socket() string { return a.sock }

// Addr returns the TCP address (host:port, "" when none).
func (a *Server) Addr() string { return a.tcp }

// XRPCAddr returns the public XRPC listener's address (host:port, "" when none).
func (a *Server) XRPCAddr() string { return a.xrpc }

// Handler returns the API as an http.Handler (for embedding and tests). It does not
// check a bearer token; the listeners Start opens do.
func (a *Server) Handler() http.Handler { return a.mux }

// listenSocket listens on a Unix socket with mode 0600, removing a stale socket file
// left by a dead process and refusing one a live process serves.
func listenSocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("%s: %w", path, node.ErrSocketInUse)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale api socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("chmod api socket: %w", err)
	}
	return ln, nil
}

func (a *Server) serve(ln net.Listener, kind listenerKind) {
	mux := a.mux
	if kind == onPublic {
		mux = a.pub // the read-only /xrpc/ methods only, no token
	}
	var h http.Handler = a.logRequests(strictPaths(mux))
	var g *connGuard
	if kind != onSocket {
		// TCP: past the token check (or, on the public listener, once a whole request
		// arrived) a connection counts as authenticated.
		g, h = a.markAuthenticated(h)
	}
	if token := a.cfg.Token; token != "" && kind != onPublic {
		// Authenticate first: nothing of the body is read before the token checks.
		h = requireToken(h, token, kind == onTCP)
	}
	base := context.WithValue(a.base, listenerKey{}, kind)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context { return base },
		// Failed TLS handshakes and the like: scanners on a public listener, or a
		// certificate not obtained yet (--acme); in baton's log, at debug.
		ErrorLog: slog.NewLogLogger(a.log.With("listener", kind.String()).Handler(), slog.LevelDebug)}
	if g != nil {
		ln = a.guardTCP(g, srv, ln) // conns.go: limits that token-less peers cannot exhaust
	} else {
		ln = limitListener(ln, a.cfg.MaxConns)
	}
	if tlsc := a.listenerTLS(kind); tlsc != nil {
		tc := tlsc.Clone()
		if len(tc.NextProtos) == 0 {
			tc.NextProtos = []string{"http/1.1"}
		}
		ln = tls.NewListener(ln, tc) // over the guard: its limits count the raw connections
	}
	a.mu.Lock()
	a.servers = append(a.servers, srv)
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Warn("api server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// logRequests logs every request at debug level, and server errors at warn.
func (a *Server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		level := slog.LevelDebug
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		a.log.Log(r.Context(), level, "api request", "method", r.Method, "path", r.URL.Path,
			"status", sw.status, "took", time.Since(start))
	})
}

// statusWriter records the status; it keeps streaming (Flush) working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over (a subscribeRepos WebSocket).
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// requireToken checks the bearer token; on the socket a request without one passes
// (the socket's file mode is its access control) but a wrong one does not.
func requireToken(h http.Handler, token string, required bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		present := r.Header.Get("Authorization") != ""
		if (required || present) && (!ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1) {
			// Close the connection instead of draining an unread body: an
			// unauthenticated client gets nothing read on its behalf.
			w.Header().Set("Connection", "close")
			writeError(w, fmt.Errorf("%w: missing or wrong bearer token", node.ErrUnauthorized))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Close stops the listeners, waiting (bounded by ctx) for requests in progress; with
// a nil ctx at once. Open /v1/commits followers end at once either way.
func (a *Server) Close(ctx context.Context) {
	if a == nil {
		return
	}
	a.cancel()
	if a.crawl != nil {
		a.crawl.Close()
	}
	a.mu.Lock()
	servers := a.servers
	a.servers = nil
	a.mu.Unlock()
	for _, s := range servers {
		if ctx == nil {
			_ = s.Close()
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := s.Shutdown(sctx); err != nil {
			_ = s.Close() // followers of /v1/commits do not end by themselves
		}
		cancel()
	}
	a.wg.Wait()
}

type handlers map[string]http.HandlerFunc

func (a *Server) route(pattern string, hs handlers) {
	a.routeQ(pattern, hs, false)
}

// routeQ registers hs for pattern on the API's router (routeOn).
func (a *Server) routeQ(pattern string, hs handlers, withQuery bool) {
	routeOn(a.mux, pattern, hs, withQuery)
}

// routeOn registers hs for pattern on mux; unless withQuery, a request with query
// parameters is refused (the handlers of such endpoints check theirs with query).
func routeOn(mux *http.ServeMux, pattern string, hs handlers, withQuery bool) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if !withQuery && r.URL.RawQuery != "" {
			if _, err := query(r); err != nil {
				writeError(w, err)
				return
			}
		}
		h, ok := hs[r.Method]
		if !ok && r.Method == http.MethodHead {
			h, ok = hs[http.MethodGet]
		}
		if !ok {
			var allow []string
			for m := range hs {
				allow = append(allow, m)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, errorJSON{Error: CodeMethod, Message: r.Method + " not allowed on " + r.URL.Path})
			return
		}
		h(w, r)
	})
}

func (a *Server) routes() {
	a.routeQ("/v1/intents", handlers{http.MethodPost: a.postIntent}, true)
	a.route("/v1/state", handlers{http.MethodGet: a.getState})
	a.routeQ("/v1/records", handlers{http.MethodGet: a.getRecords}, true)
	a.route("/v1/records/{path...}", handlers{http.MethodGet: a.getRecord})
	a.routeQ("/v1/commits", handlers{http.MethodGet: a.getCommits}, true)
	a.route("/v1/lease/release", handlers{http.MethodPost: a.postRelease})
	a.route("/v1/lease/transfer", handlers{http.MethodPost: a.postTransfer})
	a.route("/v1/lease/steal", handlers{http.MethodPost: a.postSteal})
	a.routeQ("/v1/lease/history", handlers{http.MethodGet: a.getHistory}, true)
	a.routeOps() // api_ops.go
	a.route("/v1/members", handlers{http.MethodGet: a.getMembers, http.MethodPost: a.postMember})
	a.route("/v1/members/{id}", handlers{http.MethodDelete: a.deleteMember})
	a.route("/v1/members/{id}/promote", handlers{http.MethodPost: a.postPromote})
	a.route("/v1/raft/leader", handlers{http.MethodPost: a.postMoveLeader})
	a.route("/healthz", handlers{http.MethodGet: a.getHealth})
	a.routeInvite()    // POST /v1/join-window (api_invite.go)
	a.routeXRPC(a.mux) // /xrpc/: an atproto chain's repository (xrpc.go, xrpc_stream.go)
	metrics := promhttp.HandlerFor(a.n.Registry(), promhttp.HandlerOpts{})
	a.routeQ("/metrics", handlers{http.MethodGet: metrics.ServeHTTP}, true)
	a.mux.HandleFunc("/", notFound)
	// The public listener: the same read-only /xrpc/ methods, nothing else.
	a.routeXRPC(a.pub)
	a.pub.HandleFunc("/", notFound)
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, fmt.Errorf("%w: no endpoint %s", node.ErrNotFound, r.URL.Path))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code, status := Code(err)
	writeJSON(w, status, errorJSON{Error: code, Message: Message(err)})
}

// decodeBody reads a bounded JSON body into v: unknown fields, duplicate keys, case
// variants of field names (strictKeys), trailing data and oversized bodies are
// refused. An empty body is allowed when emptyOK.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body over %d bytes", node.ErrTooLarge, MaxRequestBody)
		}
		return fmt.Errorf("%w: read body: %v", node.ErrBadRequest, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if emptyOK {
			return nil
		}
		return fmt.Errorf("%w: empty body", node.ErrBadRequest)
	}
	if !utf8.Valid(body) {
		// encoding/json would replace invalid bytes by U+FFFD, so two distinct ids
		// could collide: refuse instead.
		return fmt.Errorf("%w: the body is not valid UTF-8", node.ErrBadRequest)
	}
	if err := strictKeys(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, v)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", node.ErrBadRequest)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON object", node.ErrBadRequest)
	}
	return nil
}

func apiCtx(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

// intentShape follows an intent's validation error: what each field of a submit takes
// (README, "The sidecar API").
const intentShape = `a submit is {"id": a string unique per intent, its idempotency key (the same id again answers the first result); ` +
	`"op": "put" or "del"; "path": "namespace/key"; "value": for put, the bytes in standard base64}`

func parseOp(s string) (intentlog.Op, error) {
	switch s {
	case "put":
		return intentlog.OpPut, nil
	case "del":
		return intentlog.OpDel, nil
	}
	return 0, fmt.Errorf("%w: field \"op\" is %q: must be put or del", node.ErrBadRequest, s)
}

// decodeIntent reads POST /v1/intents: the wait parameter and the body, validated as
// the apply would (ValidateIntent). Every error maps to a 4xx.
func decodeIntent(w http.ResponseWriter, r *http.Request) (intentlog.Intent, node.Wait, time.Duration, error) {
	var wait node.Wait
	qs, err := query(r, "wait", "timeout")
	if err != nil {
		return intentlog.Intent{}, 0, 0, err
	}
	timeout := node.DefaultSubmitTimeout
	if q := qs.Get("timeout"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil || d <= 0 || d > node.DefaultSubmitTimeout {
			return intentlog.Intent{}, 0, 0, fmt.Errorf("%w: timeout=%q: a Go duration above 0 and at most %s (the default), e.g. 5s",
				node.ErrBadRequest, q, node.DefaultSubmitTimeout)
		}
		timeout = d
	}
	switch q := qs.Get("wait"); q {
	case "", "committed":
	case "signed":
		wait = node.WaitSigned
	default:
		return intentlog.Intent{}, 0, 0, fmt.Errorf("%w: wait=%q: must be committed or signed", node.ErrBadRequest, q)
	}
	var req IntentRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		return intentlog.Intent{}, 0, 0, err
	}
	op, err := parseOp(req.Op)
	if err != nil {
		return intentlog.Intent{}, 0, 0, fmt.Errorf("%w (%s)", err, intentShape)
	}
	in := intentlog.Intent{ID: req.ID, Op: op, Path: req.Path, Value: req.Value}
	if err := node.ValidateIntent(&in); err != nil {
		return intentlog.Intent{}, 0, 0, fmt.Errorf("%w (%s)", err, intentShape)
	}
	return in, wait, timeout, nil
}

func (a *Server) postIntent(w http.ResponseWriter, r *http.Request) {
	stages.Mark(stages.APIStart, 0, 0, 0)
	in, wait, timeout, err := decodeIntent(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	stages.Mark(stages.APIDecoded, 0, 0, 0)
	if err := a.n.QuorumLost(); err != nil {
		writeError(w, fmt.Errorf("%w; nothing was submitted: submit again when the quorum is back", err))
		return
	}
	ctx, cancel := apiCtx(r, timeout)
	defer cancel()
	res, err := a.n.Submit(ctx, in, wait)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusAccepted
	if wait == node.WaitSigned {
		status = http.StatusOK
	}
	stages.Mark(stages.APIAnswered, 0, 0, 0)
	writeJSON(w, status, res)
}

func (a *Server) getState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.n.State())
}

func (a *Server) getRecord(w http.ResponseWriter, r *http.Request) {
	path := r.PathValue("path")
	v, ok, err := a.n.Record(path)
	switch {
	case err != nil:
		writeError(w, err)
	case !ok:
		writeError(w, fmt.Errorf("%w: no record %q", node.ErrNotFound, path))
	default:
		writeJSON(w, http.StatusOK, RecordJSON{Path: path, Value: v})
	}
}

func (a *Server) getRecords(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "prefix", "limit")
	if err != nil {
		writeError(w, err)
		return
	}
	limit := MaxRecordsLimit
	if s := q.Get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil || l <= 0 {
			writeError(w, fmt.Errorf("%w: limit %q", node.ErrBadRequest, s))
			return
		}
		limit = min(l, MaxRecordsLimit)
	}
	prefix := q.Get("prefix")
	if len(prefix) > intentlog.MaxPathLen {
		writeError(w, fmt.Errorf("%w: prefix longer than %d bytes", node.ErrTooLarge, intentlog.MaxPathLen))
		return
	}
	recs, err := a.n.Records(prefix, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]RecordJSON, 0, len(recs))
	for _, rec := range recs {
		out = append(out, RecordJSON{Path: rec.Path, Value: rec.Value})
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": out})
}

func (a *Server) getCommits(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "from", "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	var from uint64
	if s := q.Get("from"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, fmt.Errorf("%w: from %q", node.ErrBadRequest, s))
			return
		}
		from = v
	}
	follow := false
	switch s := q.Get("follow"); s {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		writeError(w, fmt.Errorf("%w: follow %q", node.ErrBadRequest, s))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(a.base, cancel)()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	for c := range a.n.Commits(ctx, from, follow) {
		_ = rc.SetWriteDeadline(time.Now().Add(writeSlice))
		if c.Err != nil {
			_ = enc.Encode(errorJSON{Error: CodeInternal, Message: c.Err.Error()})
			return
		}
		if err := enc.Encode(CommitJSON{Seq: c.Seq, Hash: hex.EncodeToString(c.Hash[:]), Epoch: c.Epoch,
			Signer: c.Signer, CBOR: c.Raw}); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func (a *Server) leaseAnswer(w http.ResponseWriter, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lease": a.n.State().Lease})
}

func (a *Server) postRelease(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if err := decodeBody(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if req.Forward {
		a.leaseAnswer(w, a.n.HolderRelease(ctx))
		return
	}
	a.leaseAnswer(w, a.n.Release(ctx))
}

func (a *Server) postTransfer(w http.ResponseWriter, r *http.Request) {
	var req transferRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if req.Forward {
		a.leaseAnswer(w, a.n.HolderTransfer(ctx, req.To))
		return
	}
	a.leaseAnswer(w, a.n.Transfer(ctx, req.To))
}

func (a *Server) postSteal(w http.ResponseWriter, r *http.Request) {
	var req stealRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	a.leaseAnswer(w, a.n.Steal(ctx, req.Reason))
}

func (a *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	f, err := parseHistoryFilter(r)
	if err != nil {
		writeError(w, err)
		return
	}
	hist, err := a.n.LeaseHistory()
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]LeaseEventJSON, 0, len(hist))
	for _, e := range hist {
		if j := leaseEventJSON(e); f.keep(j) {
			out = append(out, j)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"history": out})
}

func (a *Server) getMembers(w http.ResponseWriter, r *http.Request) {
	ms, err := a.n.Members()
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]MemberJSON, 0, len(ms))
	for _, m := range ms {
		mj := MemberJSON{ID: m.ID.String(), Voter: m.Suffrage == raft.Voter, Leader: m.Leader}
		for _, ad := range m.Addrs {
			mj.Addrs = append(mj.Addrs, ad.String())
		}
		out = append(out, mj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"members": out, "removed": a.n.RemovedMembers()})
}

func (a *Server) postMember(w http.ResponseWriter, r *http.Request) {
	var req AddMemberRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.AddMember(ctx, req.Addr, req.NonVoter); err != nil {
		writeError(w, err)
		return
	}
	a.getMembers(w, r)
}

func (a *Server) deleteMember(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.RemoveMember(ctx, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("id")})
}

func (a *Server) postPromote(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.Promote(ctx, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	a.getMembers(w, r)
}

// MoveLeaderRequest is the body of POST /v1/raft/leader.
type MoveLeaderRequest struct {
	To string `json:"to"` // the voter to lead Raft
}

func (a *Server) postMoveLeader(w http.ResponseWriter, r *http.Request) {
	var req MoveLeaderRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	if req.To == "" {
		writeError(w, fmt.Errorf("%w: field \"to\" (the voter to lead Raft) is required", node.ErrBadRequest))
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.MoveLeader(ctx, req.To); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"leader": req.To})
}

func (a *Server) getHealth(w http.ResponseWriter, r *http.Request) {
	if a.base.Err() != nil {
		writeError(w, node.ErrStopped)
		return
	}
	if err := a.n.Health(); err != nil {
		writeError(w, err)
		return
	}
	ans := map[string]any{"ok": true, "id": a.n.ID()}
	if err := a.n.Defect(); err != nil {
		// Signing goes on; a fault of baton itself to report (see node.State.Defect).
		ans["defect"] = err.Error()
	}
	writeJSON(w, http.StatusOK, ans)
}
