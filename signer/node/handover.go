package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/transport"
)

// Graceful handovers (release, transfer) asked of any device (HolderRelease,
// HolderTransfer). The holder does them itself; a device that does not hold the lease
// forwards the request to the holder the applied record names (Network.Call), as etcdctl move-leader and consul's
// transfer-leader work from any member. The request names the epoch the asking device
// saw: a holder at another epoch refuses it (not_holder), so a request delivered late
// never ends a later hold. The holder never forwards a forwarded request again.
const (
	callRelease  byte = 3
	callTransfer byte = 4
)

type handoverRequest struct {
	Epoch uint64 `json:"epoch"`
	To    string `json:"to,omitempty"`
}

// handoverAnswer is the holder's answer: an empty Err when it is done.
type handoverAnswer struct {
	Err string `json:"err,omitempty"`
	Msg string `json:"msg,omitempty"`
}

// Handover answer codes and the sentinel each one unwraps to on the asking device.
var handoverCodes = []struct {
	code string
	err  error
}{
	{"not_holder", ErrNotHolder},
	{"bad_request", ErrBadRequest},
	{"conflict", ErrConflict},
	{"rejected", ErrRejected},
	{"timeout", ErrTimeout},
	{"no_quorum", ErrNoQuorum},
	{"stopped", ErrStopped},
	{"internal", ErrInternal},
}

// handoverCode is the answer code of the holder's error.
func handoverCode(err error) string {
	switch {
	case errors.Is(err, ErrNotHolder), errors.Is(err, election.ErrNotHolder):
		return "not_holder"
	case errors.Is(err, ErrBadRequest), errors.Is(err, election.ErrBadTarget):
		return "bad_request"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrRejected), errors.Is(err, election.ErrRejected):
		return "rejected"
	case errors.Is(err, ErrNoQuorum), errors.Is(err, transport.ErrNoLeader):
		return "no_quorum"
	case errors.Is(err, ErrTimeout), errors.Is(err, intentlog.ErrTimeout), errors.Is(err, transport.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	case errors.Is(err, ErrStopped), errors.Is(err, intentlog.ErrClosed):
		return "stopped"
	}
	return "internal"
}

// Release gives this device's hold up: a standby claims it at once. ErrNotHolder
// (election's) when this device does not hold the lease: a caller that means "my
// hold" (exec, leave, shutdown) never ends another device's. HolderRelease is the
// operator's "whoever holds it".
func (n *Node) Release(ctx context.Context) error {
	if err := n.lease.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// Transfer hands this device's hold to member to in one entry (to holds epoch+1).
func (n *Node) Transfer(ctx context.Context, to string) error {
	if err := checkTarget(to); err != nil {
		return err
	}
	if !n.isMember(ctx, to) {
		return fmt.Errorf("%w: transfer target %s is not a member", ErrConflict, to)
	}
	if err := n.lease.Transfer(ctx, to); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	return nil
}

func checkTarget(to string) error {
	if to == "" {
		return fmt.Errorf("%w: transfer needs a target", ErrBadRequest)
	}
	if _, err := peer.Decode(to); err != nil {
		return fmt.Errorf("%w: transfer target %q: %w", ErrBadRequest, to, err)
	}
	return nil
}

// HolderRelease makes the holder release the lease, wherever it is: this device does
// it if it holds, otherwise the request goes to the holder this replica's record names,
// at that epoch (see callRelease). ErrNotHolder when the lease is free or the holder
// moved on meanwhile.
func (n *Node) HolderRelease(ctx context.Context) error {
	rec := n.lease.Current()
	if rec.Holder == "" || rec.Holder == n.id {
		return n.Release(ctx)
	}
	return n.forwardHandover(ctx, callRelease, rec, "")
}

// HolderTransfer makes the holder hand the lease to member to, wherever it is.
func (n *Node) HolderTransfer(ctx context.Context, to string) error {
	if err := checkTarget(to); err != nil {
		return err
	}
	rec := n.lease.Current()
	if rec.Holder == "" || rec.Holder == n.id {
		return n.Transfer(ctx, to)
	}
	if rec.Holder == to {
		return fmt.Errorf("%w: transfer target %s holds the lease already", ErrBadRequest, shortID(to))
	}
	return n.forwardHandover(ctx, callTransfer, rec, to)
}

// forwardHandover asks rec's holder to release or transfer the lease at rec's epoch.
func (n *Node) forwardHandover(ctx context.Context, kind byte, rec intentlog.Lease, to string) error {
	op := map[byte]string{callRelease: "release", callTransfer: "transfer"}[kind]
	body, err := json.Marshal(handoverRequest{Epoch: rec.Epoch, To: to})
	if err != nil {
		return err
	}
	out, err := n.net.Call(ctx, rec.Holder, append([]byte{kind}, body...))
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w: asking the holder %s: %w", op, ErrTimeout, shortID(rec.Holder), err)
		case notDelivered(err):
			return fmt.Errorf("%s: %w: the holder %s: %w", op, ErrUnreachable, shortID(rec.Holder), err)
		}
		return fmt.Errorf("%s: %w: asking the holder %s (outcome unknown): %w", op, ErrTimeout, shortID(rec.Holder), err)
	}
	var ans handoverAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		return fmt.Errorf("%s: %w: bad answer from the holder %s", op, ErrInternal, shortID(rec.Holder))
	}
	if ans.Err == "" {
		return nil
	}
	sentinel := ErrInternal
	for _, c := range handoverCodes {
		if c.code == ans.Err {
			sentinel = c.err
		}
	}
	return fmt.Errorf("%s, asked of the holder %s: %w: %s", op, shortID(rec.Holder), sentinel, ans.Msg)
}

// handleHandover is the holder's side of a forwarded release or transfer.
func (n *Node) handleHandover(ctx context.Context, from string, kind byte, payload []byte) ([]byte, error) {
	var req handoverRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("%w: handover request: %w", ErrBadRequest, err)
	}
	answer := func(err error) ([]byte, error) {
		if err == nil {
			return json.Marshal(handoverAnswer{})
		}
		return json.Marshal(handoverAnswer{Err: handoverCode(err), Msg: err.Error()})
	}
	if rec := n.lease.Current(); rec.Holder != n.id || rec.Epoch != req.Epoch {
		return answer(fmt.Errorf("%w: the lease moved on (holder %s, epoch %d; asked for epoch %d)",
			ErrNotHolder, shortID(rec.Holder), rec.Epoch, req.Epoch))
	}
	var err error
	switch kind {
	case callRelease:
		err = n.Release(ctx)
	case callTransfer:
		err = n.Transfer(ctx, req.To)
	}
	n.logger.Info("lease handover asked by another member", "op", map[byte]string{callRelease: "release", callTransfer: "transfer"}[kind],
		"by", shortID(from), "to", shortID(req.To), "epoch", req.Epoch, "err", err)
	return answer(err)
}
