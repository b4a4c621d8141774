package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// forwarder is one incarnation's node.Network over the simulated network. It behaves
// like transport.Cluster's Propose: run locally on the leader, otherwise send the
// request to the leader and wait for its answer; retry with backoff while there is no
// leader; abandon a forwarded request when the local Raft sees another leader; give
// up at the caller's deadline with transport's errors (ErrTimeout when a leader may
// hold the request, ErrNoLeader otherwise). The leader refuses requests from devices
// outside its Raft configuration (ErrNotMember), as the connection gater does, and
// bounds its apply by the time the caller had left when it sent the request, counted
// from when the request arrives: a request delayed on the way is still applied after
// the caller gave up (a late proposal).
type forwarder struct {
	nw   *network
	ep   *endpoint
	self int
	ids  []string // device -> Raft server ID
	r    *raft.Raft
	h    node.Handlers

	ctx    context.Context // ended by Close
	cancel context.CancelFunc

	mu      sync.Mutex
	changed chan struct{} // closed at the next leader change
	obs     *raft.Observer
	obsCh   chan raft.Observation
	onLead  func(leader string)
	wg      sync.WaitGroup
}

var _ node.Network = (*forwarder)(nil)

// Forwarding limits, as transport's defaults scaled to the simulation's timeouts.
const (
	fwdRetryMin       = 5 * time.Millisecond
	fwdRetryMax       = 100 * time.Millisecond
	fwdProposeTimeout = 10 * time.Second
)

type fwdKind uint8

const (
	fwdApply fwdKind = iota + 1
	fwdBarrier
	fwdCall // to one member's Handlers.Call (not to the leader)
)

type fwdRequest struct {
	kind    fwdKind
	payload []byte
	timeout time.Duration // what the caller had left when it sent it (0: none)
}

type fwdCode uint8

const (
	codeOK fwdCode = iota
	codeNotLeader
	codeNotMember
	codeAppError
	codeNoHandler
	codeTimeout // the handler failed once the caller's deadline had passed (in flight)
)

type fwdAnswer struct {
	code  fwdCode
	body  []byte
	index uint64 // barrier
	msg   string // app error
}

func newForwarder(nw *network, ep *endpoint, self int, ids []string, r *raft.Raft, h node.Handlers, onLead func(string)) *forwarder {
	f := &forwarder{nw: nw, ep: ep, self: self, ids: ids, r: r, h: h, changed: make(chan struct{}),
		obsCh: make(chan raft.Observation, 16), onLead: onLead}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.obs = raft.NewObserver(f.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(f.obs)
	f.wg.Add(1)
	go f.watchLeader()
	nw.setServe(ep, f.serve)
	return f
}

func (f *forwarder) watchLeader() {
	defer f.wg.Done()
	for {
		select {
		case o := <-f.obsCh:
			f.mu.Lock()
			close(f.changed)
			f.changed = make(chan struct{})
			f.mu.Unlock()
			if lo, ok := o.Data.(raft.LeaderObservation); ok && f.onLead != nil {
				f.onLead(string(lo.LeaderID))
			}
		case <-f.ctx.Done():
			return
		case <-f.ep.dead:
			return
		}
	}
}

func (f *forwarder) leaderWatch() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *forwarder) Close() error {
	f.cancel()
	f.r.DeregisterObserver(f.obs)
	f.wg.Wait()
	return nil
}

func (f *forwarder) Propose(ctx context.Context, entry []byte) ([]byte, error) {
	a, err := f.toLeader(ctx, fwdRequest{kind: fwdApply, payload: entry}, func(ctx context.Context) (fwdAnswer, error) {
		b, err := f.h.Apply(ctx, entry)
		return fwdAnswer{body: b}, err
	})
	return a.body, err
}

func (f *forwarder) Barrier(ctx context.Context) (uint64, error) {
	a, err := f.toLeader(ctx, fwdRequest{kind: fwdBarrier}, func(ctx context.Context) (fwdAnswer, error) {
		idx, err := f.h.Barrier(ctx)
		return fwdAnswer{index: idx}, err
	})
	return a.index, err
}

// Call sends payload to member to's Handlers.Call, as transport.Cluster.Call does: a
// single attempt, bounded by ctx (fwdProposeTimeout when it has none); the local
// handler when to is this device; ErrNotMember when to is not in this device's Raft
// configuration or the callee refuses the caller; ErrUnreachable when to is down (a
// refused dial); a reset when to dies with the call in flight; *RemoteError (Call set)
// for the handler's error; ErrTimeout when the deadline passed first (the handler may
// or may not have done its work).
func (f *forwarder) Call(ctx context.Context, to string, payload []byte) ([]byte, error) {
	if f.ctx.Err() != nil {
		return nil, transport.ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fwdProposeTimeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.ctx, cancel) // Close ends calls in flight
	defer stop()
	fail := func(err error) error {
		switch {
		case f.ctx.Err() != nil:
			return transport.ErrClosed
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return fmt.Errorf("call %s: %w: %w (%v)", to, transport.ErrTimeout, ctx.Err(), err)
		case ctx.Err() != nil:
			return fmt.Errorf("call %s: %w (%v)", to, ctx.Err(), err)
		}
		return fmt.Errorf("call %s: %w", to, err)
	}
	if to == f.ids[f.self] {
		a, err := runBounded(ctx, func(ctx context.Context) (fwdAnswer, error) {
			b, err := f.h.Call(ctx, to, payload)
			return fwdAnswer{body: b}, err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fail(err)
			}
			return nil, err // the local handler's error, unchanged
		}
		return a.body, nil
	}
	dev := f.devOf(to)
	if dev < 0 || !f.isMember(dev) {
		return nil, fmt.Errorf("call %s: %w", to, transport.ErrNotMember)
	}
	dst := f.nw.current(f.ep, dev)
	if dst == nil {
		return nil, fmt.Errorf("call %s: %w", to, transport.ErrUnreachable) // the dial is refused
	}
	req := fwdRequest{kind: fwdCall, payload: payload}
	if dl, ok := ctx.Deadline(); ok {
		req.timeout = max(time.Until(dl), time.Millisecond)
	}
	answer := make(chan fwdAnswer, 1)
	caller := f.ep
	f.nw.sendTo(caller, dst, dev, classForward, f.nw.request(caller, req, answer))
	var a fwdAnswer
	select {
	case a = <-answer:
	case <-dst.dead:
		return nil, fail(errStreamReset) // the callee's process died: its connection resets
	case <-caller.dead:
		return nil, transport.ErrClosed
	case <-ctx.Done():
		return nil, fail(ctx.Err())
	}
	switch a.code {
	case codeOK:
		return a.body, nil
	case codeAppError:
		return nil, &transport.RemoteError{Peer: to, Msg: a.msg, Call: true}
	case codeNotMember:
		return nil, fmt.Errorf("call %s: refused by the callee: %w", to, transport.ErrNotMember)
	case codeNoHandler:
		return nil, fmt.Errorf("call %s: %w", to, transport.ErrNoHandler)
	case codeTimeout:
		return nil, fmt.Errorf("call %s: %w: %w (%s)", to, transport.ErrTimeout, context.DeadlineExceeded, a.msg)
	}
	return nil, fmt.Errorf("call %s: bad answer code %d", to, a.code)
}

var errStreamReset = errors.New("stream reset")

func (f *forwarder) toLeader(ctx context.Context, req fwdRequest, local func(context.Context) (fwdAnswer, error)) (fwdAnswer, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fwdProposeTimeout)
		defer cancel()
	}
	wait := fwdRetryMin
	var lastErr error
	inFlight := false
	for {
		if f.ctx.Err() != nil {
			return fwdAnswer{}, transport.ErrClosed
		}
		changed := f.leaderWatch()
		_, lid := f.r.LeaderWithID()
		switch {
		case f.r.State() == raft.Leader:
			a, err := runBounded(ctx, local)
			if err == nil {
				return a, nil
			}
			if !isNotLeader(err) {
				if ctx.Err() != nil {
					return fwdAnswer{}, fmt.Errorf("%w: %w", transport.ErrTimeout, err)
				}
				return fwdAnswer{}, err
			}
			lastErr, inFlight = err, true
		case lid == "" || string(lid) == f.ids[f.self]:
			lastErr, inFlight = transport.ErrNoLeader, false
		default:
			to := f.devOf(string(lid))
			if to < 0 {
				lastErr, inFlight = transport.ErrNoLeader, false
				break
			}
			if dl, ok := ctx.Deadline(); ok {
				req.timeout = max(time.Until(dl), time.Millisecond)
			}
			a, err := f.forward(ctx, to, req, changed)
			switch {
			case errors.Is(err, errLeaderChanged):
				lastErr, inFlight = err, true
				wait = fwdRetryMin
				continue
			case err != nil:
				lastErr, inFlight = err, ctx.Err() != nil
			case a.code == codeOK:
				return a, nil
			case a.code == codeNotLeader:
				lastErr, inFlight = transport.ErrNotLeader, false
			case a.code == codeNotMember:
				return fwdAnswer{}, fmt.Errorf("forward to dev%d: %w", to, transport.ErrNotMember)
			case a.code == codeNoHandler:
				return fwdAnswer{}, fmt.Errorf("forward to dev%d: %w", to, transport.ErrNoHandler)
			case a.code == codeTimeout:
				// Held by the leader until the deadline: in flight.
				lastErr, inFlight = fmt.Errorf("dev%d: %s", to, a.msg), true
			default:
				return fwdAnswer{}, &transport.RemoteError{Peer: f.ids[to], Msg: a.msg}
			}
		}
		t := time.NewTimer(wait)
		wait = min(2*wait, fwdRetryMax)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
		case <-f.ctx.Done():
		}
		t.Stop()
		return fwdAnswer{}, f.deadlineError(ctx, lastErr, inFlight)
	}
}

var errLeaderChanged = errors.New("sim: leader changed while the request was in flight")

// forward sends req to device to and waits for its answer, abandoning it when the
// local Raft stops seeing to as the leader.
func (f *forwarder) forward(ctx context.Context, to int, req fwdRequest, changed <-chan struct{}) (fwdAnswer, error) {
	answer := make(chan fwdAnswer, 1)
	caller := f.ep
	f.nw.send(caller, to, classForward, f.nw.request(caller, req, answer))
	for {
		select {
		case a := <-answer:
			return a, nil
		case <-ctx.Done():
			return fwdAnswer{}, fmt.Errorf("forward to dev%d: %w", to, ctx.Err())
		case <-caller.dead:
			return fwdAnswer{}, transport.ErrClosed
		case <-f.ctx.Done():
			return fwdAnswer{}, transport.ErrClosed
		case <-changed:
			changed = f.leaderWatch()
			if _, id := f.r.LeaderWithID(); string(id) != f.ids[to] {
				return fwdAnswer{}, errLeaderChanged
			}
		}
	}
}

// request is the delivery of a forwarded request from caller: the endpoint it
// reaches serves it (unless its node does not exist yet, when it is lost) and the
// answer travels back to answer (which takes the first).
func (nw *network) request(caller *endpoint, req fwdRequest, answer chan<- fwdAnswer) func(dst *endpoint) {
	return func(dst *endpoint) {
		serve := nw.serveOf(dst)
		if serve == nil {
			return
		}
		go serve(caller.dev, req, func(a fwdAnswer) {
			nw.sendTo(dst, caller, caller.dev, classAnswer, func(*endpoint) {
				select {
				case answer <- a:
				default:
				}
			})
		})
	}
}

// serve answers a forwarded request on this device (the leader, it hopes, unless it
// is a call to this member).
func (f *forwarder) serve(from int, req fwdRequest, reply func(fwdAnswer)) {
	if f.ctx.Err() != nil {
		return // closed: no answer, like a reset stream
	}
	if !f.isMember(from) {
		reply(fwdAnswer{code: codeNotMember})
		return
	}
	timeout := fwdProposeTimeout
	if req.timeout > 0 {
		timeout = min(timeout, req.timeout)
		if req.kind == fwdCall {
			// As transport's: a call lives as long as its caller (the holder may
			// wait until a commit is signed).
			timeout = req.timeout
		}
	}
	if req.kind != fwdCall && f.r.State() != raft.Leader {
		reply(fwdAnswer{code: codeNotLeader})
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, timeout)
	defer cancel()
	var a fwdAnswer
	var err error
	switch req.kind {
	case fwdApply:
		a.body, err = f.h.Apply(ctx, req.payload)
	case fwdBarrier:
		a.index, err = f.h.Barrier(ctx)
	case fwdCall:
		if f.h.Call == nil {
			reply(fwdAnswer{code: codeNoHandler})
			return
		}
		a.body, err = f.h.Call(ctx, f.ids[from], req.payload)
	}
	switch {
	case err == nil:
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller's deadline passed (its own ctx ends a moment later): a timeout
		// for the caller, not the handler's error (transport's codeTimeout).
		a = fwdAnswer{code: codeTimeout, msg: err.Error()}
	case req.kind != fwdCall && isNotLeader(err):
		a = fwdAnswer{code: codeNotLeader}
	default:
		a = fwdAnswer{code: codeAppError, msg: err.Error()}
	}
	reply(a)
}

func (f *forwarder) isMember(dev int) bool {
	fut := f.r.GetConfiguration()
	if fut.Error() != nil {
		return false
	}
	for _, s := range fut.Configuration().Servers {
		if string(s.ID) == f.ids[dev] {
			return true
		}
	}
	return false
}

func (f *forwarder) devOf(id string) int {
	for i, s := range f.ids {
		if s == id {
			return i
		}
	}
	return -1
}

func (f *forwarder) deadlineError(ctx context.Context, lastErr error, inFlight bool) error {
	if f.ctx.Err() != nil {
		return transport.ErrClosed
	}
	cerr := ctx.Err()
	if cerr == nil {
		cerr = context.Canceled
	}
	switch {
	case errors.Is(cerr, context.Canceled):
		return fmt.Errorf("%w (last: %v)", cerr, lastErr)
	case inFlight:
		return fmt.Errorf("%w: %w (last: %v)", transport.ErrTimeout, cerr, lastErr)
	case lastErr == nil || errors.Is(lastErr, transport.ErrNoLeader):
		return fmt.Errorf("%w: %w", transport.ErrNoLeader, cerr)
	}
	return fmt.Errorf("%w: %w (last: %v)", transport.ErrNoLeader, cerr, lastErr)
}

func runBounded(ctx context.Context, f func(context.Context) (fwdAnswer, error)) (fwdAnswer, error) {
	type result struct {
		a   fwdAnswer
		err error
	}
	ch := make(chan result, 1)
	go func() {
		a, err := f(ctx)
		ch <- result{a, err}
	}()
	select {
	case r := <-ch:
		return r.a, r.err
	case <-ctx.Done():
		return fwdAnswer{}, ctx.Err()
	}
}

func isNotLeader(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, transport.ErrNotLeader)
}
