package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"
)

// raftTransport is one incarnation's raft.Transport over the simulated network. An
// RPC is a request message on the link to the target and an answer message on the
// link back; a lost message, a cut link, a dead or paused peer all end in the
// caller's timeout, as on a real network. Pipelining is not offered (Raft falls back
// to one AppendEntries at a time); heartbeats go through the consumer channel like
// everything else.
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

func (t *raftTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
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
