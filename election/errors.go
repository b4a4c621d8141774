package election

import (
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// Errors returned by this package. Match them with errors.Is; the typed errors below
// carry details (errors.As) and unwrap to one of these.
var (
	// ErrLeaseHeld: another device holds a live lease (see HeldError for who and until
	// when). Only an operator's Steal takes a live lease.
	ErrLeaseHeld = errors.New("election: lease held by another device")
	// ErrLostRace: the claim's compare-and-set lost: the stored record is no longer
	// the one the claim was decided on (another claim won, or a renewal or any other
	// lease write this device had not applied yet landed first).
	ErrLostRace = errors.New("election: lost the claim race")
	// ErrStaleRecord: a renew, release or transfer was refused because the record,
	// which still names this device at the same epoch, changed since this device read
	// it (stale_rev: an earlier write of its own, whose outcome it did not learn, was
	// applied). The lease is not lost; retry once the local replica has caught up.
	ErrStaleRecord = errors.New("election: lease record changed since it was read")
	// ErrNotHolder: this device does not hold the lease (or the apply said so:
	// not_holder / epoch_mismatch on a renew, release or transfer).
	ErrNotHolder = errors.New("election: not the lease holder")
	// ErrNoReason: Steal was called without a reason.
	ErrNoReason = errors.New("election: a steal needs a reason")
	// ErrStandoff: this device released the lease less than a TTL ago and lets others
	// claim it first.
	ErrStandoff = errors.New("election: standing off after a release")
	// ErrBadTarget: Transfer to an empty ID or to this device.
	ErrBadTarget = errors.New("election: bad transfer target")
	// ErrRejected: the apply rejected a lease entry for another reason (RejectedError
	// has the reason).
	ErrRejected = errors.New("election: lease entry rejected")
	// ErrLost is the cause of a HoldContext's cancellation: the hold ended.
	ErrLost = errors.New("election: lease lost")
	// ErrBadOptions: New was given invalid options or arguments.
	ErrBadOptions = errors.New("election: invalid options")
)

// HeldError is returned by Claim when another device holds a live lease. It unwraps to
// ErrLeaseHeld.
type HeldError struct {
	Holder string
	Epoch  uint64
	// Expires is ts + ttl on the holder's wall clock (what the record promises).
	Expires time.Time
	// ClaimableIn is the earliest time from now at which this device could claim if
	// the record stays unchanged (its own observation decides, not Expires).
	ClaimableIn time.Duration
	// SuspectedSkew: the record has been observed unchanged for a TTL but the wall
	// clocks disagree.
	SuspectedSkew bool
}

func (e *HeldError) Error() string {
	s := fmt.Sprintf("election: lease held by %s at epoch %d (expires %s by its clock; claimable in %v by ours)",
		e.Holder, e.Epoch, e.Expires.UTC().Format(time.RFC3339Nano), e.ClaimableIn)
	if e.SuspectedSkew {
		s += ", clock skew suspected"
	}
	return s
}

func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

// RejectedError is an apply rejection of a lease entry. It unwraps to ErrLostRace (a
// claim's CAS lost), ErrNotHolder (a renew, release or transfer by a device that no
// longer holds), ErrStaleRecord (a renew, release or transfer decided on an older
// revision of a record that still names this device), or ErrRejected.
type RejectedError struct {
	Op     string // "claim", "steal", "renew", "release", "transfer"
	Reason intentlog.Reason
	Index  uint64 // Raft index of the rejected entry
	Lease  intentlog.Lease
	kind   error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("election: %s rejected at index %d: %s (lease: holder %q epoch %d)",
		e.Op, e.Index, e.Reason, e.Lease.Holder, e.Lease.Epoch)
}

func (e *RejectedError) Unwrap() error { return e.kind }

func rejected(op string, res intentlog.Result) *RejectedError {
	e := &RejectedError{Op: op, Reason: res.Reason, Index: res.Index, Lease: res.Lease, kind: ErrRejected}
	switch op {
	case "claim", "steal":
		if res.Reason == intentlog.ReasonEpochMismatch || res.Reason == intentlog.ReasonStaleRev {
			e.kind = ErrLostRace
		}
	default:
		switch res.Reason {
		case intentlog.ReasonEpochMismatch, intentlog.ReasonNotHolder:
			e.kind = ErrNotHolder
		case intentlog.ReasonStaleRev:
			// The apply checks holder and epoch first: stale_rev means both still
			// match, only the revision moved.
			e.kind = ErrStaleRecord
		}
	}
	return e
}
