package api

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// TCP connection limits (issue 19, item 3). A connection counts as unauthenticated
// until one of its requests passed the bearer token check; peers without the token can
// then hold none of what authenticated ones need:
//
//   - a new connection never waits for a slot: Accept never blocks on a limit;
//   - unauthenticated connections are capped in total (MaxConns/2) and per remote IP
//     (MaxUnauthPerIP); past a cap, the oldest unauthenticated connection is closed to
//     make room, provided it has had MinUnauthAge to authenticate, else the newcomer
//     is closed (a burst cannot push out a client that just connected);
//   - past MaxConns open connections, an idle keep-alive connection is reclaimed first
//     (oldest first, authenticated or not), then the oldest unauthenticated one; only
//     when every connection is busy with an authenticated request is the newcomer
//     closed;
//   - headers must arrive within ReadHeaderTimeout, and idle connections are closed
//     after IdleTimeout anyway.
//
// The public XRPC listener (Config.XRPCAddr) has no token: there a connection counts
// as authenticated once one whole request (its headers) arrived, so the same rules
// keep requests in progress from being pushed out by peers that send headers slowly or
// open connections in bursts, and reclaim idle keep-alive connections first. Each
// listener has its own guard: public peers cannot take the TCP API's connections.
// What they can still do is keep up to MaxConns requests in progress (reading the
// answers slowly, each cut off after WriteTimeout): the listener serves the open
// network as well as one process can, not as a rate-limiting proxy would.
//
// The Unix socket keeps the simple per-listener cap (limitListener): its file mode is
// its access control.
const (
	MaxUnauthPerIP = 16
	MinUnauthAge   = 500 * time.Millisecond
	// MaxURLBytes bounds a request's URL (path and query): longer ones get a JSON 414.
	// MaxHeaderBytes is well above it so that such a URL reaches the check instead of
	// the server's plain-text 431.
	MaxURLBytes = 8 << 10
	// lingerTimeout and lingerBytes bound how long and how much a connection closed
	// after an answer that left its request body unread is drained, so that the
	// client reads the answer (a JSON 413) instead of a connection reset.
	lingerTimeout = time.Second
	lingerBytes   = 8 << 20
)

// tcpMaxHeaderBytes is the TCP listener's MaxHeaderBytes: room for a URL beyond
// MaxURLBytes (answered with a JSON 414) and MaxHeaderBytes of other headers.
const tcpMaxHeaderBytes = 256 << 10

// connGuard enforces the limits above on one listener.
type connGuard struct {
	max, maxUnauth, maxUnauthPerIP int
	minAge                         time.Duration

	mu      sync.Mutex
	conns   map[*guardedConn]struct{} // open connections; iterated only to pick a victim
	evicted atomic.Uint64             // connections closed to make room (or refused)
	closing atomic.Bool               // the server is shutting down: no lingering
	stop    <-chan struct{}           // closed when the server closes: no lingering either
}

func newConnGuard(n int) *connGuard {
	return &connGuard{max: n, maxUnauth: max(1, n/2), maxUnauthPerIP: min(MaxUnauthPerIP, max(1, n/2)),
		minAge: MinUnauthAge, conns: map[*guardedConn]struct{}{}}
}

type guardedConn struct {
	net.Conn
	g      *connGuard
	ip     string
	opened time.Time

	// guarded by g.mu
	authed bool
	idle   bool
	active bool // a request was in progress at the last state change

	once sync.Once
	err  error
	hard atomic.Bool // closed by the guard: no lingering
}

type guardListener struct {
	net.Listener
	g *connGuard
}

func (g *connGuard) listener(ln net.Listener) net.Listener { return &guardListener{Listener: ln, g: g} }

// Accept admits every connection, closing others (or this one) to keep the limits.
func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		gc := &guardedConn{Conn: c, g: l.g, ip: remoteIP(c), opened: time.Now()}
		if l.g.admit(gc) {
			return gc, nil
		}
		l.g.evicted.Add(1)
		_ = c.Close()
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// admit registers c, closing other connections to keep the limits; false: refuse c.
func (g *connGuard) admit(c *guardedConn) bool {
	ok, victims := g.admitLocked(c)
	for _, v := range victims { // outside g.mu: Close takes it
		g.evicted.Add(1)
		v.closeHard()
	}
	return ok
}

func (g *connGuard) admitLocked(c *guardedConn) (ok bool, victims []*guardedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Unauthenticated per IP, then in total.
	for _, cap := range []struct {
		n  int
		ip string
	}{{g.maxUnauthPerIP, c.ip}, {g.maxUnauth, ""}} {
		if g.countUnauth(cap.ip) < cap.n {
			continue
		}
		v := g.oldest(func(o *guardedConn) bool { return !o.authed && (cap.ip == "" || o.ip == cap.ip) })
		if v == nil || c.opened.Sub(v.opened) < g.minAge {
			return false, victims
		}
		victims = append(victims, v)
		delete(g.conns, v)
	}
	if len(g.conns) >= g.max {
		v := g.oldest(func(o *guardedConn) bool { return o.idle })
		if v == nil {
			v = g.oldest(func(o *guardedConn) bool { return !o.authed && c.opened.Sub(o.opened) >= g.minAge })
		}
		if v == nil {
			return false, victims
		}
		victims = append(victims, v)
		delete(g.conns, v)
	}
	g.conns[c] = struct{}{}
	return true, victims
}

func (g *connGuard) countUnauth(ip string) int {
	n := 0
	for c := range g.conns {
		if !c.authed && (ip == "" || c.ip == ip) {
			n++
		}
	}
	return n
}

// oldest returns the longest-open connection that ok accepts (nil if none). Map order
// does not matter: the oldest wins, ties broken by address.
func (g *connGuard) oldest(ok func(*guardedConn) bool) *guardedConn {
	var best *guardedConn
	for c := range g.conns {
		if !ok(c) {
			continue
		}
		if best == nil || c.opened.Before(best.opened) ||
			(c.opened.Equal(best.opened) && c.RemoteAddr().String() < best.RemoteAddr().String()) {
			best = c
		}
	}
	return best
}

// connState follows the server's view of each connection (http.Server.ConnState).
func (g *connGuard) connState(c net.Conn, s http.ConnState) {
	gc, ok := guarded(c)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch s {
	case http.StateActive:
		gc.idle, gc.active = false, true
	case http.StateIdle:
		gc.idle, gc.active = true, false
	case http.StateHijacked, http.StateClosed:
		// A hijacked connection (a subscribeRepos stream) leaves the count: streams
		// have their own cap and must not take the slots of requests. It is closed
		// at once when its stream ends, with nothing to drain.
		gc.active = false
		delete(g.conns, gc)
	}
}

type guardKey struct{}

// guarded returns the guarded connection under c (under TLS when the listener serves it).
func guarded(c net.Conn) (*guardedConn, bool) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	gc, ok := c.(*guardedConn)
	return gc, ok
}

// connContext puts the connection into its requests' context (http.Server.ConnContext).
func (g *connGuard) connContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := guarded(c); ok {
		return context.WithValue(ctx, guardKey{}, gc)
	}
	return ctx
}

// authenticated marks the connection of every request that reaches h (placed behind
// the token check) as authenticated.
func (g *connGuard) authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gc, ok := r.Context().Value(guardKey{}).(*guardedConn); ok {
			g.mu.Lock()
			gc.authed = true
			g.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// closeHard closes at once (an eviction: nothing to linger for).
func (c *guardedConn) closeHard() {
	c.hard.Store(true)
	_ = c.Close()
}

// Close closes the connection. After an answer that left request bytes unread (the
// connection was active), it first half-closes and drains them for a bounded time, so
// that the client reads the answer instead of a reset.
func (c *guardedConn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		linger := c.active && !c.hard.Load() && !c.g.closing.Load() && !closed(c.g.stop)
		delete(c.g.conns, c)
		c.g.mu.Unlock()
		if tc, ok := c.Conn.(*net.TCPConn); ok && linger {
			if tc.CloseWrite() == nil && tc.SetReadDeadline(time.Now().Add(lingerTimeout)) == nil {
				_, _ = io.CopyN(io.Discard, tc, lingerBytes)
			}
		}
		c.err = c.Conn.Close()
	})
	return c.err
}

// requestLimits answers an oversized request before anything of it is read: a URL
// over MaxURLBytes with 414, a declared body over MaxRequestBody with 413 (JSON like
// every answer; the connection is then closed after draining, see guardedConn.Close).
// A body without a declared length is bounded where it is read (decodeBody).
func requestLimits(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case len(r.RequestURI) > MaxURLBytes:
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusRequestURITooLong, errorJSON{Error: CodeTooLarge,
				Message: fmt.Sprintf("request URL of %d bytes, at most %d", len(r.RequestURI), MaxURLBytes)})
		case r.ContentLength > MaxRequestBody:
			w.Header().Set("Connection", "close")
			writeError(w, fmt.Errorf("%w: request body of %d bytes, at most %d", node.ErrTooLarge, r.ContentLength, MaxRequestBody))
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// guardTCP puts a TCP listener under the connGuard g: srv's hooks follow each
// connection, and oversized requests get JSON answers. The guard comes from
// markAuthenticated, which the handler chain (built first) created.
func (a *Server) guardTCP(g *connGuard, srv *http.Server, ln net.Listener) net.Listener {
	srv.ConnState = g.connState
	srv.ConnContext = g.connContext
	srv.MaxHeaderBytes = tcpMaxHeaderBytes
	srv.RegisterOnShutdown(func() { g.closing.Store(true) })
	g.stop = a.base.Done() // Close cancels it before closing the servers
	return g.listener(ln)
}

// markAuthenticated creates a TCP listener's guard and returns it with h marking the
// connections of the requests that reach it (behind the token check, if any)
// authenticated; oversized requests are answered before h.
func (a *Server) markAuthenticated(h http.Handler) (*connGuard, http.Handler) {
	g := newConnGuard(a.cfg.MaxConns)
	return g, g.authenticated(requestLimits(h))
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
