package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
)

// Forwarding submissions to the lease holder (Network.Call). A request is one
// byte, callSubmit, then the intents entry encoding of the intents; the answer is a
// JSON forwardAnswer with one result per intent, in order.

const callSubmit byte = 1

// Forwarding bounds: a forward waits at most ForwardTimeout (within the caller's
// deadline) for the holder's answer before the intent goes into the log instead. A
// holder that answers slower than this is treated as unreachable.
const (
	MinForwardTimeout = time.Second
	MaxForwardTimeout = 5 * time.Second
)

type forwardAnswer struct {
	Results []forwardResult `json:"results"`
}

type forwardResult struct {
	Index     uint64 `json:"index,omitempty"`
	Seq       uint64 `json:"seq,omitempty"`
	Hash      string `json:"hash,omitempty"`
	Duplicate bool   `json:"dup,omitempty"`
	// Err is "not_holder" when the holder did not sign it (its hold ended), or
	// another error text.
	Err string `json:"err,omitempty"`
}

const errNotHolderText = "not_holder"

// forwardTimeout is how long a forward may wait: half the TTL, within bounds.
func (n *Node) forwardTimeout() time.Duration {
	return min(max(n.cfg.TTL/2, MinForwardTimeout), MaxForwardTimeout)
}

// forward sends in to holder and returns its result. signer.ErrNotHolder: the holder
// did not take it (route again); any other error: it may or may not have been taken.
func (n *Node) forward(ctx context.Context, holder string, in intentlog.Intent) (SubmitResult, error) {
	entry, err := intentlog.Encode(intentlog.IntentsEntry{Intents: []intentlog.Intent{in}})
	if err != nil {
		return SubmitResult{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, n.forwardTimeout())
	defer cancel()
	out, err := n.net.Call(fctx, holder, append([]byte{callSubmit}, entry...))
	if err != nil {
		return SubmitResult{}, err
	}
	var ans forwardAnswer
	if err := json.Unmarshal(out, &ans); err != nil || len(ans.Results) != 1 {
		return SubmitResult{}, fmt.Errorf("%w: bad forward answer from %s", ErrInternal, shortID(holder))
	}
	r := ans.Results[0]
	switch {
	case r.Err == errNotHolderText:
		return SubmitResult{}, signer.ErrNotHolder
	case r.Err != "":
		return SubmitResult{}, fmt.Errorf("holder %s: %s", shortID(holder), r.Err)
	}
	return SubmitResult{ID: in.ID, Index: r.Index, Seq: r.Seq, Hash: r.Hash, Duplicate: r.Duplicate}, nil
}

// handleCall is Handlers.Call: another member forwards submissions to this holder.
func (n *Node) handleCall(ctx context.Context, from string, payload []byte) ([]byte, error) {
	if len(payload) == 0 || payload[0] != callSubmit {
		return nil, fmt.Errorf("%w: unknown call", ErrBadRequest)
	}
	e, err := intentlog.Decode(payload[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	ie, ok := e.(intentlog.IntentsEntry)
	if !ok || len(ie.Intents) == 0 {
		return nil, fmt.Errorf("%w: a submission carries intents", ErrBadRequest)
	}
	ans := forwardAnswer{Results: make([]forwardResult, len(ie.Intents))}
	tickets := make([]*signer.Ticket, len(ie.Intents))
	for i, in := range ie.Intents {
		if err := ValidateIntent(&in); err != nil {
			ans.Results[i].Err = err.Error()
			continue
		}
		if n.loop == nil {
			ans.Results[i].Err = errNotHolderText
			continue
		}
		t, err := n.loop.Add(in)
		switch {
		case errors.Is(err, signer.ErrNotHolder):
			ans.Results[i].Err = errNotHolderText
		case err != nil:
			ans.Results[i].Err = err.Error()
		default:
			tickets[i] = t
		}
	}
	for i, t := range tickets {
		if t == nil {
			continue
		}
		select {
		case <-t.Done():
		case <-ctx.Done():
			ans.Results[i].Err = "timeout"
			continue
		case <-n.ctx.Done():
			ans.Results[i].Err = "stopped"
			continue
		}
		o := t.Outcome()
		switch {
		case errors.Is(o.Err, signer.ErrNotHolder):
			ans.Results[i].Err = errNotHolderText
		case o.Err != nil:
			ans.Results[i].Err = o.Err.Error()
		default:
			r := outcomeResult(ie.Intents[i].ID, o)
			ans.Results[i] = forwardResult{Index: r.Index, Seq: r.Seq, Hash: r.Hash, Duplicate: r.Duplicate}
		}
	}
	return json.Marshal(ans)
}
