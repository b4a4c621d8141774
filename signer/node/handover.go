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
// forwards the request to the holder the applied record names (Network.Call), as
// etcdctl move-leader and consul's transfer-leader work from any member. The request names the epoch the asking device
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

// handoverCodes: each answer code, the sentinel it unwraps to on the asking device,
// and the errors of the holder's that it stands for (the sentinel among them); the
// first match wins, "internal" for anything else.
var handoverCodes = []struct {
	code string
	err  error
	is   []error
}{
	{"not_holder", ErrNotHolder, []error{ErrNotHolder, election.ErrNotHolder}},
	{"bad_request", ErrBadRequest, []error{ErrBadRequest, election.ErrBadTarget}},
	{"conflict", ErrConflict, []error{ErrConflict}},
	{"rejected", ErrRejected, []error{ErrRejected, election.ErrRejected}},
	{"no_quorum", ErrNoQuorum, []error{ErrNoQuorum, transport.ErrNoLeader}},
	{"timeout", ErrTimeout, []error{ErrTimeout, intentlog.ErrTimeout, transport.ErrTimeout, context.DeadlineExceeded, context.Canceled}},
	{"stopped", ErrStopped, []error{ErrStopped, intentlog.ErrClosed}},
}

// handoverCode is the answer code of the holder's error.
func handoverCode(err error) string {
	for _, c := range handoverCodes {
		for _, target := range c.is {
			if errors.Is(err, target) {
				return c.code
			}
		}
	}
	return "internal"
}

// handoverSentinel is the error an answer code unwraps to.
func handoverSentinel(code string) error {
	for _, c := range handoverCodes {
		if c.code == code {
			return c.err
		}
	}
	return ErrInternal
}

func handoverOp(kind byte) string {
	if kind == callTransfer {
		return "transfer"
	}
	return "release"
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
	op := handoverOp(kind)
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
	if ans.Err != "" {
		return fmt.Errorf("%s, asked of the holder %s: %w: %s", op, shortID(rec.Holder), handoverSentinel(ans.Err), ans.Msg)
	}
	// Done and applied on the leader; a read barrier brings this replica there too,
	// so that what the caller reads next (the API answers with the lease) shows it.
	if err := n.prop.Sync(ctx); err != nil {
		n.logger.Debug("read barrier after a forwarded handover", "err", err)
	}
	return nil
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
	n.logger.Info("lease handover asked by another member", "op", handoverOp(kind),
		"by", from, "to", req.To, "epoch", req.Epoch, "err", err)
	return answer(err)
}
