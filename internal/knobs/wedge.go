package knobs

// Signer changes package signer's loop.
type Signer struct {
	// SkipValidation makes Loop.Add take an intent without checking it with the
	// apply's rule (intentlog.ValidateIntent): an invalid one reaches a commit.
	SkipValidation bool
	// ResignRefused treats a commit the apply refused for its content like one
	// refused by the fence: the loop moves to the next epoch and signs the same ops
	// again (the one-request wedge of issue 19.1).
	ResignRefused bool
	// TrustRefusal makes a bad_prev or bad_seq answer for a commit at or below the
	// answer's head count as refused instead of being settled from the local chain
	// (the false divergence alarm of issue 19.5).
	TrustRefusal bool
	// UnboundedRev takes an atproto commit's rev from the holder's own clock however
	// far ahead of the replicated log time it is (neither the cluster's clock nor the
	// signer.MaxRevAhead bound): a clock that jumped forward signs revs a relay
	// refuses.
	UnboundedRev bool
	// OwnRevClock takes an atproto commit's rev from the holder's own clock, bounded
	// by log time + signer.MaxRevAhead, not from the cluster's (the rule before issue
	// 22's future_rev fix): a founder minutes fast starts log time there, and a holder
	// as fast signs revs a relay refuses.
	OwnRevClock bool
	// MaxInFlight > 0 sets the loop's pipeline depth (commits in flight while the
	// holder leads Raft) where its LoopConfig.MaxInFlight is 0, as a node's is. The
	// default was 8 until issue 23 measured one deep as faster; tests of the deeper
	// pipeline's resend and refusal handling, and the simulator's knob
	// max-in-flight-8, set 8.
	MaxInFlight int
}
