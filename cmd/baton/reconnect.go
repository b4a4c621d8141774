package main

import (
	"context"
	"fmt"
	"time"
)

// Backoff of tail and watch between attempts to reach a node that stopped answering
// (a restart, a failover drill): from reconnectMin, doubling, at most reconnectMax.
const (
	reconnectMin = 250 * time.Millisecond
	reconnectMax = 10 * time.Second
)

// reconnector keeps a following command (tail, watch) going across its node's
// restarts, as `consul watch` does: it says once on stderr that it lost the node and
// retries with backoff, then says when it is back. With --no-reconnect the first
// loss ends the command instead.
type reconnector struct {
	c    *cli
	name string
	off  bool // --no-reconnect
	wait time.Duration
	down bool
}

// again reports whether to try again after the stream ended with err, after the
// backoff; false when reconnecting is off or ctx is done.
func (r *reconnector) again(ctx context.Context, err error) bool {
	if r.off || ctx.Err() != nil {
		return false
	}
	if !r.down {
		r.down = true
		r.wait = reconnectMin
		fmt.Fprintf(r.c.stderr, "baton %s: the node stopped answering (%s); reconnecting with backoff up to %s (--no-reconnect to exit instead)\n",
			r.name, describe(err), reconnectMax)
	}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	r.wait = min(2*r.wait, reconnectMax)
	return true
}

// connected notes a working stream, saying so after an outage.
func (r *reconnector) connected(what string) {
	if r.down {
		r.down = false
		fmt.Fprintf(r.c.stderr, "baton %s: reconnected%s\n", r.name, what)
	}
}
