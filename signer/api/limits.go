package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// Server limits. A client that sends its headers or body slowly, or idles on a
// keep-alive connection, is cut off; each listener serves at most MaxConns
// connections at once (further ones wait in the kernel's backlog).
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second // the whole request, body included
	// WriteTimeout bounds a response from the end of its request's headers: a
	// submission waits up to node.DefaultSubmitTimeout before it answers.
	WriteTimeout    = 2 * node.DefaultSubmitTimeout
	IdleTimeout     = 60 * time.Second
	MaxHeaderBytes  = 16 << 10
	DefaultMaxConns = 64
	// MinTokenLen bounds a bearer token from below (a generated one has 32 bytes of
	// randomness, hex-encoded).
	MinTokenLen = 16
	// writeSlice is how long one write of a response may block (a follower of
	// /v1/commits that stops reading is cut off after it).
	writeSlice = 30 * time.Second
)

// limitListener accepts at most n connections at once.
func limitListener(ln net.Listener, n int) net.Listener {
	return &limited{Listener: ln, sem: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	sem chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// strictPaths refuses, with a JSON answer, request paths the router would otherwise
// redirect or clean: "." and ".." segments, empty segments, and escapes that hide a
// "/". Every answer of the API is JSON, errors included.
func strictPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		bad := strings.Contains(p, "//") || strings.Contains(strings.ToLower(p), "%2f")
		for _, seg := range strings.Split(p, "/")[1:] {
			if seg == "." || seg == ".." || strings.EqualFold(seg, "%2e") || strings.EqualFold(seg, "%2e%2e") {
				bad = true
			}
		}
		if bad {
			writeError(w, fmt.Errorf("%w: path %q has empty, \".\" or \"..\" segments", node.ErrBadPath, p))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// query parses the request's query strictly: malformed escapes and parameters
// other than allowed are refused; each allowed one appears at most once.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	return queryList(r, "", allowed...)
}

// queryList is query where the parameter list (an XRPC array, one value per
// repetition) may appear any number of times; list must be among allowed.
func queryList(r *http.Request, list string, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", node.ErrBadRequest, err)
	}
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, fmt.Errorf("%w: %s takes no query parameters (got %q)", node.ErrBadRequest, r.URL.Path, k)
			}
			return nil, fmt.Errorf("%w: unknown query parameter %q (allowed: %s)", node.ErrBadRequest, k, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 && k != list {
			return nil, fmt.Errorf("%w: query parameter %q given %d times", node.ErrBadRequest, k, len(vs))
		}
	}
	return q, nil
}
