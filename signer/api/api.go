package api

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

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
	// XRPCCertificate, with XRPCTLS, returns the certificate it serves now (GET
	// /v1/public, `status`): acme.Manager.Leaf, LeafOfFiles. Optional.
	XRPCCertificate func() (*x509.Certificate, error)
	// PublicHost is the name the public listener answers for (`status`; Crawl's
	// Hostname when empty). Optional.
	PublicHost string
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
