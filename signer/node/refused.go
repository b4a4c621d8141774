package node

import (
	"errors"
	"fmt"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
)

// loopError maps an error of the signer loop about one submission (Add's, or a
// Ticket's Outcome.Err) to the node's: an intent the apply's rule refuses is a bad
// request with that rule's reason; a submission dropped after its commit was refused
// for its content (signer.RefusedError) keeps the apply's reason (backlog: retry
// later).
func loopError(err error) error {
	var ie *intentlog.IntentError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ie):
		return intentError(ie)
	case errors.Is(err, signer.ErrBacklog):
		return fmt.Errorf("%w: %w", ErrBacklog, err)
	case errors.Is(err, signer.ErrRefused):
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

// validate is ValidateIntent at this node's entrances (Submit, forwarded
// submissions), unless a test knob lets invalid intents through to the loop.
func (n *Node) validate(in *intentlog.Intent) error {
	if k := n.cfg.Knobs; k != nil && k.Signer != nil && k.Signer.SkipValidation {
		return nil
	}
	var f uint64 = intentlog.CommitFormatVersion
	if n.log != nil {
		f = n.log.View().ChainFormat()
	}
	return validateIn(f, in)
}

// Defect returns a defect this node observed that does not stop it signing (the
// first commit of its loop the apply refused for its content), or nil. State and
// /healthz show it.
func (n *Node) Defect() error {
	if n.loop == nil {
		return nil
	}
	return n.loop.Defect()
}

// RefusalStats are the signer loop's counters about refused commits (for tests and
// the simulator; State has them too, but costs more to build).
type RefusalStats struct {
	CommitsSigned  uint64
	SignedRefused  uint64
	Bumps          uint64
	ContentRefused map[intentlog.Reason]uint64
}

// RefusalStats returns this node's RefusalStats (zero without a signer loop).
func (n *Node) RefusalStats() RefusalStats {
	if n.loop == nil {
		return RefusalStats{}
	}
	ls := n.loop.Stats()
	return RefusalStats{CommitsSigned: ls.CommitsSigned, SignedRefused: ls.SignedRefused, Bumps: ls.Bumps,
		ContentRefused: ls.ContentRefused}
}
