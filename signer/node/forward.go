package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/transport"
)

// Forwarding submissions to the lease holder (Network.Call). A request is one
// byte, callSubmit, then the intents entry encoding of the intents; the answer is a
// JSON forwardAnswer with one result per intent, in order.

const callSubmit byte = 1

// forwardRetry is the pause before a forward whose outcome was unknown (a reset
// stream, say) is sent again to the same holder. Sending it again is safe: the holder
// remembers the IDs it has queued or signed.
const forwardRetry = 50 * time.Millisecond

type forwardAnswer struct {
	Results []forwardResult `json:"results"`
}

type forwardResult struct {
	Index     uint64 `json:"index,omitempty"`
	Seq       uint64 `json:"seq,omitempty"`
	Hash      string `json:"hash,omitempty"`
	Duplicate bool   `json:"dup,omitempty"`
	// Err is one of the forward codes below when the holder did not sign it, with
	// Msg for bad_request.
	Err string `json:"err,omitempty"`
	Msg string `json:"msg,omitempty"`
}

// Forward codes: not_holder (the holder did not take it, or its hold ended before
// signing it: route again), timeout and stopped (it may still be signed: the outcome
// is unknown), backlog (retry later), bad_request.
const (
	errNotHolderText = "not_holder"
	errTimeoutText   = "timeout"
	errStoppedText   = "stopped"
	errBacklogText   = "backlog"
	errBadText       = "bad_request"
)

// forwardErr is the error of a forward result's code.
func forwardErr(holder string, r forwardResult) error {
	switch r.Err {
	case errNotHolderText:
		return signer.ErrNotHolder
	case errTimeoutText:
		return fmt.Errorf("%w: the holder %s had not signed it yet", ErrTimeout, shortID(holder))
	case errStoppedText:
		return fmt.Errorf("%w: the holder %s stopped", ErrTimeout, shortID(holder))
	case errBacklogText:
		return fmt.Errorf("%w: at the holder %s", ErrBacklog, shortID(holder))
	case errBadText:
		return fmt.Errorf("%w: %s", ErrBadRequest, r.Msg)
	}
	return fmt.Errorf("%w: holder %s: %s %s", ErrInternal, shortID(holder), r.Err, r.Msg)
}

// forward sends in to holder and returns its result. It never lets the intent go
// elsewhere while the holder may still sign it: an answer is the result; a forward
// that never reached the holder (unreachable, refused, no handler) or that the holder
// did not take (not_holder) is signer.ErrNotHolder (route again); a forward whose
// outcome is unknown is sent again while the holder keeps the lease, and once the
// lease has moved to another device, this replica (which has then applied whatever the
// old hold got applied) either remembers the ID (its result) or not
// (signer.ErrNotHolder: route again). ctx's end is ErrTimeout.
func (n *Node) forward(ctx context.Context, holder string, in intentlog.Intent) (SubmitResult, error) {
	entry, err := intentlog.Encode(intentlog.IntentsEntry{Intents: []intentlog.Intent{in}})
	if err != nil {
		return SubmitResult{}, err
	}
	payload := append([]byte{callSubmit}, entry...)
	type answer struct {
		out []byte
		err error
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := make(chan answer, 1)
	send := func() {
		go func() {
			out, err := n.net.Call(cctx, holder, payload)
			calls <- answer{out, err}
		}()
	}
	send()
	var retry <-chan time.Time
	for {
		w := n.log.Watch()
		if rec := n.log.View().Lease; rec.Holder != holder {
			// The hold ended (another device claimed, or it was released): anything
			// the old hold signed is applied here or fenced for good.
			if st, ok, err := n.log.IntentStatus(in.ID); err == nil && ok {
				return SubmitResult{ID: in.ID, Index: st.Index, Seq: st.Seq, Duplicate: true}, nil
			}
			return SubmitResult{}, signer.ErrNotHolder
		}
		select {
		case a := <-calls:
			if a.err == nil {
				return n.forwardResult(holder, in, a.out)
			}
			if notDelivered(a.err) {
				return SubmitResult{}, fmt.Errorf("%w: %w", signer.ErrNotHolder, a.err)
			}
			if ctx.Err() != nil {
				return SubmitResult{}, ErrTimeout
			}
			n.logger.Debug("forward to the holder: outcome unknown, sending again", "holder", shortID(holder), "id", in.ID, "err", a.err)
			retry = time.After(forwardRetry)
		case <-retry:
			retry = nil
			send()
		case <-w:
		case <-ctx.Done():
			return SubmitResult{}, ErrTimeout
		case <-n.ctx.Done():
			return SubmitResult{}, ErrStopped
		}
	}
}

// notDelivered reports whether a Call failed before the holder could take anything.
func notDelivered(err error) bool {
	var re *transport.RemoteError
	return errors.As(err, &re) || errors.Is(err, transport.ErrUnreachable) || errors.Is(err, transport.ErrRefused) ||
		errors.Is(err, transport.ErrHandshake) || errors.Is(err, transport.ErrNotMember) ||
		errors.Is(err, transport.ErrNoHandler) || errors.Is(err, ErrUnsupported)
}

func (n *Node) forwardResult(holder string, in intentlog.Intent, out []byte) (SubmitResult, error) {
	var ans forwardAnswer
	if err := json.Unmarshal(out, &ans); err != nil || len(ans.Results) != 1 {
		return SubmitResult{}, fmt.Errorf("%w: bad forward answer from %s", ErrInternal, shortID(holder))
	}
	r := ans.Results[0]
	if r.Err != "" {
		return SubmitResult{}, forwardErr(holder, r)
	}
	return SubmitResult{ID: in.ID, Index: r.Index, Seq: r.Seq, Hash: r.Hash, Duplicate: r.Duplicate}, nil
}

// handleCall is Handlers.Call: another member forwards submissions to this holder.
func (n *Node) handleCall(ctx context.Context, from string, payload []byte) ([]byte, error) {
	if len(payload) == 1 && payload[0] == callStopping {
		return n.handleGoodbye(from)
	}
	if len(payload) == 1 && payload[0] == callHealth {
		return n.handleHealth()
	}
	if len(payload) == 1 && payload[0] == callName {
		return n.handleName()
	}
	if len(payload) > 1 && payload[0] == callMoveLeader {
		return n.handleMoveLeader(from, payload[1:])
	}
	n.heardFrom(from)
	if len(payload) == 1 && payload[0] == callDigests {
		return n.handleDigests()
	}
	if len(payload) == 1 && payload[0] == callClock {
		return n.handleClock()
	}
	if len(payload) == memoryCallLen && payload[0] == callMemory {
		return n.handleMemoryCall(from, payload)
	}
	if len(payload) > 0 && (payload[0] == callRelease || payload[0] == callTransfer) {
		return n.handleHandover(ctx, from, payload[0], payload[1:])
	}
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
		if err := n.validate(&in); err != nil {
			ans.Results[i].Err, ans.Results[i].Msg = errBadText, err.Error()
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
		case errors.Is(err, signer.ErrBacklog):
			ans.Results[i].Err = errBacklogText
		case err != nil:
			ans.Results[i].Err, ans.Results[i].Msg = errBadText, err.Error()
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
			ans.Results[i].Err = errTimeoutText
			continue
		case <-n.ctx.Done():
			ans.Results[i].Err = errStoppedText
			continue
		}
		o := t.Outcome()
		switch {
		case errors.Is(o.Err, signer.ErrNotHolder):
			ans.Results[i].Err = errNotHolderText
		case errors.Is(o.Err, signer.ErrStopped):
			ans.Results[i].Err = errStoppedText
		case errors.Is(o.Err, signer.ErrBacklog):
			ans.Results[i].Err = errBacklogText
		case o.Err != nil:
			ans.Results[i].Err, ans.Results[i].Msg = errBadText, o.Err.Error()
		default:
			r := outcomeResult(ie.Intents[i].ID, o)
			ans.Results[i] = forwardResult{Index: r.Index, Seq: r.Seq, Hash: r.Hash, Duplicate: r.Duplicate}
		}
	}
	return json.Marshal(ans)
}
