package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftTransport is one incarnation's raft.Transport over the simulated network. An
// RPC is a request message on the link to the target and an answer message on the
// link back; a lost message, a cut link, a dead or paused peer all end in the
// caller's timeout, as on a real network. Raft's pipelined replication runs over a
// pipeline as raft.NetworkTransport's does in real use (pipeline); heartbeats go
// through the consumer channel like everything else.
type raftTransport struct {
	nw      *network
	ep      *endpoint
	index   map[raft.ServerAddress]int // address -> device
	timeout time.Duration
}

var (
	_ raft.Transport   = (*raftTransport)(nil)
	_ raft.WithPreVote = (*raftTransport)(nil)
	_ raft.WithClose   = (*raftTransport)(nil)
)

var (
	errRPCTimeout = errors.New("sim: rpc timed out")
	errClosed     = errors.New("sim: endpoint closed")
)

func (t *raftTransport) Consumer() <-chan raft.RPC     { return t.ep.raftIn }
func (t *raftTransport) LocalAddr() raft.ServerAddress { return t.ep.addr }

func (t *raftTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if _, ok := t.index[target]; !ok {
		return nil, fmt.Errorf("sim: unknown raft address %q", target)
	}
	p := &pipeline{t: t, id: id, target: target, reqs: make(chan *pipeFuture, pipelineDepth),
		out: make(chan raft.AppendFuture, pipelineDepth), done: make(chan struct{})}
	go p.run()
	return p, nil
}

// pipelineDepth bounds the AppendEntries a pipeline holds, sent or waiting to be
// (raft.NetworkTransport's rpcMaxPipeline is 128).
const pipelineDepth = 128

// pipeline is Raft's pipelined replication to one peer: its AppendEntries go out in
// the order Raft sends them, as over raft.NetworkTransport's one connection, and
// their answers (or failures) come back in that order. One is on the network at a
// time: the simulated network may reorder messages, a TCP connection does not.
type pipeline struct {
	t      *raftTransport
	id     raft.ServerID
	target raft.ServerAddress
	reqs   chan *pipeFuture
	out    chan raft.AppendFuture
	done   chan struct{}
	once   sync.Once
}

type pipeFuture struct {
	start time.Time
	req   *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	err   error
}

func (f *pipeFuture) Error() error                          { return f.err }
func (f *pipeFuture) Start() time.Time                      { return f.start }
func (f *pipeFuture) Request() *raft.AppendEntriesRequest   { return f.req }
func (f *pipeFuture) Response() *raft.AppendEntriesResponse { return f.resp }

func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &pipeFuture{start: time.Now(), req: args, resp: resp}
	select {
	case p.reqs <- f:
		return f, nil
	case <-p.done:
		return nil, raft.ErrPipelineShutdown
	}
}

func (p *pipeline) run() {
	for {
		select {
		case f := <-p.reqs:
			// A failed one ends the connection: this and every later one fail.
			if f.err = p.t.AppendEntries(p.id, p.target, f.req, f.resp); f.err != nil {
				p.fail(f)
				return
			}
			select {
			case p.out <- f:
			case <-p.done:
				return
			}
		case <-p.done:
			return
		}
	}
}

// fail passes f and every AppendEntries after it on as failed, until Close.
func (p *pipeline) fail(f *pipeFuture) {
	for {
		select {
		case p.out <- f:
		case <-p.done:
			return
		}
		select {
		case f = <-p.reqs:
			f.err = raft.ErrPipelineShutdown
		case <-p.done:
			return
		}
	}
}

func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.out }

func (p *pipeline) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (t *raftTransport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	out, err := t.call(target, func() any {
		c := *args
		c.Entries = make([]*raft.Log, len(args.Entries))
		for i, l := range args.Entries {
			lc := *l
			c.Entries[i] = &lc
		}
		return &c
	}, nil, t.timeout)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.AppendEntriesResponse)
	return nil
}

func (t *raftTransport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	out, err := t.call(target, func() any { c := *args; return &c }, nil, t.timeout)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.RequestVoteResponse)
	return nil
}

func (t *raftTransport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	out, err := t.call(target, func() any { c := *args; return &c }, nil, t.timeout)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.RequestPreVoteResponse)
	return nil
}

func (t *raftTransport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	snap, err := io.ReadAll(io.LimitReader(data, args.Size))
	if err != nil {
		return fmt.Errorf("sim: read snapshot: %w", err)
	}
	out, err := t.call(target, func() any { c := *args; return &c }, snap, 10*t.timeout)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.InstallSnapshotResponse)
	return nil
}

func (t *raftTransport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	out, err := t.call(target, func() any { c := *args; return &c }, nil, t.timeout)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.TimeoutNowResponse)
	return nil
}

func (t *raftTransport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}
func (t *raftTransport) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }
func (t *raftTransport) SetHeartbeatHandler(func(raft.RPC))     {}

// Close ends nothing on the network (the device's incarnation ends at a crash or at
// the end of the run); calls in flight fail through their timeouts.
func (t *raftTransport) Close() error { return nil }

// call sends a request to target and waits for the answer or the timeout. args makes
// a fresh copy of the request for each delivery (a duplicated message is delivered
// twice; the receiver must not share the sender's structs).
func (t *raftTransport) call(target raft.ServerAddress, args func() any, data []byte, timeout time.Duration) (any, error) {
	to, ok := t.index[target]
	if !ok {
		return nil, fmt.Errorf("sim: unknown raft address %q", target)
	}
	answer := make(chan raft.RPCResponse, 1)
	caller := t.ep
	t.nw.send(caller, to, classRaft, func(dst *endpoint) {
		rch := make(chan raft.RPCResponse, 1)
		rpc := raft.RPC{Command: args(), RespChan: rch}
		if data != nil {
			rpc.Reader = bytes.NewReader(data)
		}
		select {
		case dst.raftIn <- rpc:
		case <-dst.dead:
			return
		}
		go func() {
			select {
			case r := <-rch:
				t.nw.sendTo(dst, caller, caller.dev, classRaft, func(*endpoint) {
					select {
					case answer <- r:
					default: // a duplicate's answer, or the caller has its answer already
					}
				})
			case <-dst.dead:
			}
		}()
	})
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-answer:
		if r.Error != nil {
			return nil, r.Error
		}
		return r.Response, nil
	case <-timer.C:
		return nil, errRPCTimeout
	case <-caller.dead:
		return nil, errClosed
	}
}
