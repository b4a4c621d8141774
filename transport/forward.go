package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Propose runs entry through the leader's ApplyFunc and returns its result. On the
// leader it calls the ApplyFunc directly; on a follower it sends the entry to the
// current leader over ForwardProtocol (one request, one response on a fresh stream of
// the open connection). While the leader is unknown or changing it retries with
// bounded exponential backoff, until ctx's deadline (or ProposeTimeout when ctx has
// none); it never returns later than that. A forwarded request is abandoned and
// retried as soon as the local Raft sees another leader (or none), so a leader that
// hangs with its connections open (a stopped process) holds a proposal for about one
// heartbeat timeout, not until the deadline.
//
// Errors: ErrNoLeader when no leader could be reached before the deadline;
// ErrTimeout (also matching context.DeadlineExceeded) when the deadline passed while
// a leader held the request, the entry may have been committed; ErrNotMember when the
// leader refused this device; *RemoteError for an error returned by the leader's
// ApplyFunc (not retried); any error of the local ApplyFunc (on the leader) other than
// a not-leader error, unchanged; ctx.Err() wrapped when ctx was cancelled.
func (c *Cluster) Propose(ctx context.Context, entry []byte) ([]byte, error) {
	if len(entry) > c.cfg.MaxFrameSize {
		return nil, fmt.Errorf("propose: %w", ErrTooLarge)
	}
	return c.toLeader(ctx, kindApply, entry, c.apply)
}

// Barrier is a read barrier at the leader: it returns the leader's applied index
// after a Raft barrier there (ClusterConfig.Barrier), so that a device that has
// applied up to that index has seen every entry committed before the call. On the
// leader it calls ClusterConfig.Barrier directly; on a follower it forwards a
// barrier request to the leader, with Propose's retries, leader-change handling and
// deadline (ctx's, or ProposeTimeout when it has none; never exceeded). A barrier
// has no effect on the state, so retrying it is always safe.
//
// Errors as for Propose, and ErrNoHandler when the leader has no
// ClusterConfig.Barrier; an error of the leader's barrier function other than a
// not-leader error comes back as *RemoteError (unchanged when this node leads).
func (c *Cluster) Barrier(ctx context.Context) (uint64, error) {
	out, err := c.toLeader(ctx, kindBarrier, nil, c.localBarrier)
	if err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	if len(out) != 8 {
		return 0, fmt.Errorf("barrier: answer of %d bytes, want 8", len(out))
	}
	return binary.BigEndian.Uint64(out), nil
}

// localBarrier runs ClusterConfig.Barrier and encodes its index.
func (c *Cluster) localBarrier(ctx context.Context, _ []byte) ([]byte, error) {
	if c.cfg.Barrier == nil {
		return nil, ErrNoHandler
	}
	idx, err := c.cfg.Barrier(ctx)
	if err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint64(nil, idx), nil
}

// toLeader runs local on this node if it is the leader, else sends (kind, payload) to
// the leader over ForwardProtocol, following leader changes until ctx ends.
func (c *Cluster) toLeader(ctx context.Context, kind byte, payload []byte, local func(context.Context, []byte) ([]byte, error)) ([]byte, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	wait := c.cfg.RetryMin
	var lastErr error // why the last attempt failed
	inFlight := false // the last attempt reached a leader
	self := c.h.ID()
	for {
		if c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		changed := c.leaderWatch() // before reading the leader: no change goes unseen
		_, lid := c.r.LeaderWithID()
		switch {
		case c.r.State() == raft.Leader:
			res, err := runBounded(ctx, local, payload)
			if err == nil {
				return res, nil
			}
			if !isNotLeader(err) {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: %w", ErrTimeout, err)
				}
				return nil, err
			}
			lastErr, inFlight = err, true
		case lid == "" || string(lid) == self.String():
			lastErr, inFlight = ErrNoLeader, false
		default:
			leader, err := peer.Decode(string(lid))
			if err != nil {
				return nil, fmt.Errorf("leader id %q: %w", lid, err)
			}
			code, body, err := c.forward(ctx, leader, kind, payload, changed)
			switch {
			case errors.Is(err, errLeaderChanged):
				// The request may have reached the old leader: in flight. Retry at
				// once with whoever leads now (or wait for a leader).
				lastErr, inFlight = fmt.Errorf("forward to %s: %w", leader, err), true
				wait = c.cfg.RetryMin
				continue
			case err != nil:
				lastErr, inFlight = fmt.Errorf("forward to %s: %w", leader, err), ctx.Err() != nil
			case code == codeOK:
				return body, nil
			case code == codeNotLeader:
				lastErr, inFlight = fmt.Errorf("%s: %w", leader, ErrNotLeader), false
			case code == codeNotMember:
				return nil, fmt.Errorf("forward to %s: %w", leader, ErrNotMember)
			case code == codeAppError:
				return nil, &RemoteError{Peer: leader.String(), Msg: string(body)}
			case code == codeNoHandler:
				return nil, fmt.Errorf("forward to %s: %w", leader, ErrNoHandler)
			case code == codeTimeout:
				// Held by the leader until the deadline (or ProposeTimeout): in flight.
				lastErr, inFlight = fmt.Errorf("%s: %s", leader, body), true
			default:
				return nil, fmt.Errorf("forward to %s: bad request: %s", leader, body)
			}
		}
		if !c.backoff(ctx, &wait) {
			return nil, c.deadlineError(ctx, lastErr, inFlight)
		}
	}
}

// runBounded runs f and returns when it does or when ctx ends, whichever is first,
// so a callback that ignores its context cannot hold the caller past the deadline.
func runBounded(ctx context.Context, f func(context.Context, []byte) ([]byte, error), payload []byte) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := f(ctx, payload)
		ch <- result{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// deadlineError explains why toLeader gave up.
func (c *Cluster) deadlineError(ctx context.Context, lastErr error, inFlight bool) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	cerr := ctx.Err()
	if cerr == nil {
		cerr = context.Canceled
	}
	if errors.Is(cerr, context.Canceled) {
		return fmt.Errorf("%w (last: %v)", cerr, lastErr)
	}
	if inFlight {
		return fmt.Errorf("%w: %w (last: %v)", ErrTimeout, cerr, lastErr)
	}
	if lastErr == nil || errors.Is(lastErr, ErrNoLeader) {
		return fmt.Errorf("%w: %w", ErrNoLeader, cerr)
	}
	return fmt.Errorf("%w: %w (last: %v)", ErrNoLeader, cerr, lastErr)
}

// isNotLeader reports whether err means "this node is not (or no longer) the leader".
func isNotLeader(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, ErrNotLeader)
}

// errLeaderChanged: a forwarded request was abandoned because the local Raft no
// longer sees its target as the leader.
var errLeaderChanged = errors.New("leader changed while the request was in flight")

// forward sends one request to leader over ForwardProtocol and waits for the answer,
// but abandons it (resetting the stream; the error matches errLeaderChanged) as soon
// as the local Raft stops seeing leader as the leader. A leader that hangs without
// closing its connections (a stopped process, a frozen machine or VM) accepts the
// request into its TCP and yamux buffers and never answers: without this, the
// request would wait for the whole deadline although the rest of the cluster has
// elected a new leader within an election timeout, and every proposal queued behind
// it would time out too. changed is a leaderWatch taken before leader was read.
func (c *Cluster) forward(ctx context.Context, leader peer.ID, kind byte, payload []byte, changed <-chan struct{}) (byte, []byte, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		for {
			select {
			case <-cctx.Done():
				return
			case <-changed:
			}
			changed = c.leaderWatch()
			if _, id := c.r.LeaderWithID(); string(id) != leader.String() {
				cancel(errLeaderChanged)
				return
			}
		}
	}()
	code, body, err := c.call(cctx, leader, ForwardProtocol, kind, payload)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errLeaderChanged) {
		return 0, nil, fmt.Errorf("%w (%v)", errLeaderChanged, err)
	}
	return code, body, err
}

// remainingMS is the time ctx has left at now, in whole milliseconds rounded up (at
// least 1; 0: no deadline), as a request carries it. Rounded down, the callee's
// deadline fell up to a millisecond before the caller's, and a call came back
// "timeout" (DeadlineExceeded) before the caller's deadline (TestCall, 799.7 ms of an
// 800 ms deadline, under -race).
func remainingMS(ctx context.Context, now time.Time) uint64 {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	left := dl.Sub(now)
	return uint64(max((left+time.Millisecond-1)/time.Millisecond, 1))
}

// call sends one request to p on proto and reads the response, bounded by ctx.
func (c *Cluster) call(ctx context.Context, p peer.ID, proto protocol.ID, kind byte, payload []byte) (byte, []byte, error) {
	s, err := c.h.newStream(ctx, p, proto)
	if err != nil {
		return 0, nil, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	timeoutMS := remainingMS(ctx, time.Now())
	fail := func(what string, err error) error {
		_ = s.Reset()
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			// The stream's deadline is ctx's and may fire first: wait the instant
			// for ctx to report it, so that callers see a deadline, not an I/O error.
			<-ctx.Done()
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	w := bufio.NewWriter(s)
	if err := writeRequest(w, kind, timeoutMS, payload); err != nil {
		return 0, nil, fail("write request", err)
	}
	_ = s.CloseWrite()
	code, body, err := readResponse(bufio.NewReader(s), c.cfg.MaxFrameSize)
	if err != nil {
		return 0, nil, fail("read response", err)
	}
	c.h.touch(p)
	return code, body, nil
}

// handleForward serves ForwardProtocol: members only.
func (c *Cluster) handleForward(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	w := bufio.NewWriter(s)
	_ = s.SetReadDeadline(time.Now().Add(c.cfg.ProposeTimeout))
	kind, timeoutMS, payload, err := readRequest(bufio.NewReader(s), c.cfg.MaxFrameSize)
	if err != nil {
		_ = s.Reset()
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	if !c.h.IsMember(remote) {
		c.log.Warn("refused forwarded request from non-member", "peer", remote)
		_ = writeResponse(w, codeNotMember, nil)
		return
	}
	c.h.touch(remote)
	timeout := c.cfg.ProposeTimeout
	if timeoutMS > 0 {
		timeout = min(timeout, time.Duration(timeoutMS)*time.Millisecond)
		if kind == kindCall {
			// A call lives as long as its caller: the handler may legitimately
			// wait longer than a proposal would (e.g. until a commit is signed).
			timeout = time.Duration(timeoutMS) * time.Millisecond
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	_ = s.SetWriteDeadline(time.Now().Add(timeout + time.Second))

	var res []byte
	switch kind {
	case kindApply, kindBarrier:
		if c.r.State() != raft.Leader {
			_ = writeResponse(w, codeNotLeader, []byte(c.Leader()))
			return
		}
		if kind == kindApply {
			res, err = c.apply(ctx, payload)
		} else {
			res, err = c.localBarrier(ctx, payload)
		}
	case kindJoin:
		res, err = c.leaderJoin(ctx, payload)
	case kindRemove:
		res, err = c.leaderRemove(ctx, payload)
	case kindAddrs:
		res, err = c.answerAddrs(payload)
	case kindCall:
		c.serveCall(ctx, w, remote, payload)
		return
	default:
		_ = writeResponse(w, codeBadRequest, []byte(fmt.Sprintf("unknown request kind %d", kind)))
		return
	}
	switch {
	case err == nil:
		_ = writeResponse(w, codeOK, res)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The handler failed because the caller's deadline passed (the two expire
		// together, this one a little earlier): the caller hears a timeout, not an
		// application error that would stop its retries.
		_ = writeResponse(w, codeTimeout, []byte(err.Error()))
	case isNotLeader(err):
		_ = writeResponse(w, codeNotLeader, []byte(c.Leader()))
	case errors.Is(err, ErrNoHandler):
		_ = writeResponse(w, codeNoHandler, nil)
	case errors.Is(err, errBadRequest):
		_ = writeResponse(w, codeBadRequest, []byte(err.Error()))
	default:
		_ = writeResponse(w, codeAppError, []byte(err.Error()))
	}
}

// errBadRequest marks malformed requests (answered with codeBadRequest).
var errBadRequest = errors.New("bad request")
