package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Call sends one request to the member to (not to the Raft leader: to a device
// chosen by the caller, e.g. the lease holder) over ForwardProtocol and returns the
// result of to's ClusterConfig.OnCall. It is a single attempt, never retried (the
// handler need not be idempotent). ctx bounds it strictly: the call returns by ctx's
// deadline (ProposeTimeout when ctx has none) whatever the callee does, including a
// callee that hangs with its connection open (a stopped process) or a connection
// that is lost; the remaining time travels with the request and bounds the handler's
// context. A call to this device itself runs the local OnCall (with from = this
// device). Closing the Cluster ends calls in flight.
//
// Errors: ErrNotMember when to is not a member in this device's view, or the callee
// refused this device; ErrNoHandler when the callee has no OnCall; *RemoteError (Call
// set) for an error returned by the callee's handler (the local handler's error is
// returned unchanged); ErrTimeout (also matching context.DeadlineExceeded) when the
// deadline passed before the answer or the handler failed once it had passed, the
// handler may or may not have done its work; ctx.Err()
// wrapped when ctx was cancelled; ErrTooLarge for a payload over MaxFrameSize;
// ErrClosed; connection errors (ErrUnreachable, ErrHandshake, ErrRefused, a reset
// stream) as they happen, without waiting for the deadline.
func (c *Cluster) Call(ctx context.Context, to peer.ID, payload []byte) ([]byte, error) {
	if len(payload) > c.cfg.MaxFrameSize {
		return nil, fmt.Errorf("call %s: %w", to, ErrTooLarge)
	}
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel) // Close ends calls in flight
	defer stop()
	if to == c.h.ID() {
		res, err := runBounded(ctx, func(ctx context.Context, p []byte) ([]byte, error) {
			return c.onCall(ctx, to, p)
		}, payload)
		if err != nil {
			return nil, c.callError(ctx, to, err)
		}
		return res, nil
	}
	if !c.h.IsMember(to) {
		return nil, fmt.Errorf("call %s: %w", to, ErrNotMember)
	}
	code, body, err := c.call(ctx, to, ForwardProtocol, kindCall, payload)
	if err != nil {
		return nil, c.callError(ctx, to, err)
	}
	switch code {
	case codeOK:
		return body, nil
	case codeAppError:
		return nil, &RemoteError{Peer: to.String(), Msg: string(body), Call: true}
	case codeNotMember:
		return nil, fmt.Errorf("call %s: refused by the callee: %w", to, ErrNotMember)
	case codeNoHandler:
		return nil, fmt.Errorf("call %s: %w", to, ErrNoHandler)
	case codeTimeout:
		return nil, fmt.Errorf("call %s: %w: %w (%s)", to, ErrTimeout, context.DeadlineExceeded, body)
	default:
		return nil, fmt.Errorf("call %s: bad request: %s", to, body)
	}
}

// callError explains a failed Call: closed, deadline, cancellation or err itself.
func (c *Cluster) callError(ctx context.Context, to peer.ID, err error) error {
	switch {
	case c.ctx.Err() != nil:
		return ErrClosed
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("call %s: %w: %w (%v)", to, ErrTimeout, ctx.Err(), err)
	case ctx.Err() != nil:
		return fmt.Errorf("call %s: %w (%v)", to, ctx.Err(), err)
	case to == c.h.ID():
		return err // the local handler's error, unchanged
	}
	return fmt.Errorf("call %s: %w", to, err)
}

// onCall runs ClusterConfig.OnCall.
func (c *Cluster) onCall(ctx context.Context, from peer.ID, payload []byte) ([]byte, error) {
	if c.cfg.OnCall == nil {
		return nil, ErrNoHandler
	}
	return c.cfg.OnCall(ctx, from, payload)
}

// serveCall answers one kindCall request (the membership check is done). Every
// handler error, whatever it wraps, goes back as text (codeAppError): a callee's
// "not leader" must not look like the transport's.
func (c *Cluster) serveCall(ctx context.Context, w *bufio.Writer, from peer.ID, payload []byte) {
	if c.cfg.OnCall == nil {
		_ = writeResponse(w, codeNoHandler, nil)
		return
	}
	res, err := c.cfg.OnCall(ctx, from, payload)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The caller's deadline passed (its own ctx ends a moment later): a
			// timeout for the caller, not the handler's error.
			_ = writeResponse(w, codeTimeout, []byte(err.Error()))
			return
		}
		_ = writeResponse(w, codeAppError, []byte(err.Error()))
		return
	}
	_ = writeResponse(w, codeOK, res)
}
