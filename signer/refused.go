package signer

import (
	"errors"
	"fmt"

	"github.com/batonhq/baton/intentlog"
)

// Refused commits (DESIGN.md, "Refused commits"). The apply refuses a commit of this
// loop for one of two kinds of reasons:
//
//   - the fence (epoch_mismatch, not_holder: the hold is over) or a race on the head
//     (bad_prev, bad_seq: another commit is at its seq). The ops are fine: they go
//     again in a later commit (under the next epoch, or by the next holder).
//   - its content (bad_ops, duplicate_op, backlog, bad_signature, bad_chain, ...).
//     Every entrance validates an intent with the apply's own rule, so this is a
//     defect (but for backlog and duplicate_op: see Defect): it is counted
//     (LoopStats.ContentRefused), reported (Loop.Defect), and the
//     ops that explain it are never signed again: each is answered with the apply's
//     reason (or, for an ID the log remembers, with its original result) and dropped;
//     the rest is signed in the next commit. A refusal that no op explains (the key's
//     signatures, a pending op that differs: this replica's state is not the
//     leader's) would be refused again whatever is signed: the loop stops signing
//     (Unfit) instead of signing again.
//
// Either way the next commit is signed under a new epoch (one Bump), since a device
// never signs two different commits for one (seq, epoch); a content refusal never
// re-signs its ops, so it costs at most one bump and one signed-but-refused commit
// (plus those in flight behind it).

// ErrRefused: the apply refused the commit that carried a submission for its
// content; the submission was dropped (RefusedError says why).
var ErrRefused = errors.New("signer: the apply refused the commit for its content")

// RefusedError is the outcome of a submission dropped after the apply refused its
// commit for its content: Reason is the apply's, Err the intent's own fault when
// known (an *intentlog.IntentError, or ErrBacklog for a full dedupe window).
type RefusedError struct {
	ID     string
	Reason intentlog.Reason
	Err    error
}

func (e *RefusedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("intent %q: commit refused (%s): %v", e.ID, e.Reason, e.Err)
	}
	return fmt.Sprintf("intent %q: commit refused (%s)", e.ID, e.Reason)
}

// Unwrap makes a RefusedError match ErrRefused and its Err.
func (e *RefusedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrRefused}
	}
	return []error{ErrRefused, e.Err}
}

// FenceReason reports whether a commit refused for r was refused by the fence or a
// race on the head (its ops may go again), not for its content.
func FenceReason(r intentlog.Reason) bool {
	switch r {
	case intentlog.ReasonEpochMismatch, intentlog.ReasonNotHolder, intentlog.ReasonBadPrev,
		intentlog.ReasonBadSeq, intentlog.ReasonStaleRev:
		return true
	}
	return false
}

// Defect reports whether a content refusal for r is a defect of baton's. Two are
// not: backlog (the genesis's MaxIDs window is full: a capacity answer) and
// duplicate_op (a carried ID reached the log another way first, a client's retry
// on another device: a race on the dedupe window). Both are handled as content
// refusals (the op that explains it is answered and dropped, the rest signed).
func Defect(r intentlog.Reason) bool {
	return r != intentlog.ReasonBacklog && r != intentlog.ReasonDuplicateOp
}

// settleLocally reports whether a refusal of c must be settled from the local chain
// rather than believed: any refusal whose head is at or past c's seq may be the answer
// to a second copy of c (the transport resends a commit after a leader change) that
// came back after the first copy applied: bad_prev or bad_seq, or a fence reason when
// the lease moved on between the two copies (the simulator's seed 52: a copy of seq
// 359 at epoch 5 refused as epoch_mismatch after the holder's claim of epoch 6, the
// first copy applied everywhere, and a false divergence alarm). resolve decides once
// the local replica reaches c's seq: applied if its chain holds c there, else void.
// (A content reason never comes with the head at c's seq: the apply checks the seq
// and prev first.)
func (l *Loop) settleLocally(c *inflight, res intentlog.Result) bool {
	if l.knobs().TrustRefusal {
		return false
	}
	return res.Head.Seq >= c.seq
}

// contentRefused handles a commit refused for its content (see above): counted,
// reported, and analysed once the local replica has applied the refusing entry.
func (l *Loop) contentRefused(s *signer, c *inflight, res intentlog.Result) {
	err := fmt.Errorf("commit seq %d epoch %d refused for its content (%s): a defect, every entrance validates intents with the apply's rule", c.seq, c.epoch, res.Reason)
	l.count(func(st *LoopStats) { st.ContentRefused[res.Reason]++ })
	l.noteErr(err)
	l.log.Error("commit refused for its content: dropping the ops that explain it", "seq", c.seq, "epoch", c.epoch,
		"reason", res.Reason, "carried", len(c.carried), "pending", len(c.pending))
	if Defect(res.Reason) {
		l.defect.CompareAndSwap(nil, &err)
	}
	r := res
	c.content = &r
	s.stopEpoch = max(s.stopEpoch, c.epoch)
}

// analyse settles the content refusals in flight once the local replica has applied
// the refusing entry (so that what it remembers is what the apply saw): the offending
// submissions are answered and dropped; the others stay with the commit, which
// resolve voids (its epoch ends with the bump), so they go again. It reports whether
// every content refusal in flight is settled.
func (l *Loop) analyse(s *signer, v intentlog.View) bool {
	all := true
	for _, c := range s.flight {
		if c.content == nil || c.analysed {
			continue
		}
		if v.AppliedIndex < c.content.Index {
			all = false
			continue
		}
		c.analysed = true
		reason := c.content.Reason
		var keep []*queued
		dropped := 0
		for _, q := range c.carried {
			o, bad := l.offending(q.in, reason)
			if !bad {
				keep = append(keep, q)
				continue
			}
			dropped++
			l.in.mu.Lock()
			delete(l.in.byID, q.in.ID)
			l.in.mu.Unlock()
			q.finish(o)
		}
		c.carried = keep
		if dropped == 0 {
			err := fmt.Errorf("commit seq %d epoch %d refused for its content (%s) and no op it carries explains it: this device stops signing (its key, or its replica's state, is not what the others apply)", c.seq, c.epoch, reason)
			l.unfit.CompareAndSwap(nil, &err)
			l.noteErr(err)
			l.log.Error("signing stopped", "err", err)
			// Its submissions go to the next holder (the IDs dedupe).
			l.in.mu.Lock()
			for _, q := range c.carried {
				delete(l.in.byID, q.in.ID)
			}
			l.in.mu.Unlock()
			for _, q := range c.carried {
				q.finish(Outcome{Err: ErrNotHolder})
			}
			c.carried = nil
			kick(l.kickTk)
		}
	}
	return all
}

// offending reports whether the carried op in explains a content refusal for reason,
// and the outcome its submitter gets.
func (l *Loop) offending(in intentlog.Intent, reason intentlog.Reason) (Outcome, bool) {
	if err := intentlog.ValidateIntentIn(l.cfg.Log.View().ChainFormat(), in); err != nil {
		return Outcome{Err: &RefusedError{ID: in.ID, Reason: reason, Err: err}}, true
	}
	if t, ok, err := l.remembered(in.ID); err == nil && ok {
		return t.Outcome(), true // its ID was accepted meanwhile: that is its result
	}
	if reason == intentlog.ReasonBacklog {
		return Outcome{Err: &RefusedError{ID: in.ID, Reason: reason, Err: ErrBacklog}}, true
	}
	return Outcome{}, false
}

// analysing reports whether a content refusal in flight waits for the local replica.
func (s *signer) analysing() bool {
	for _, c := range s.flight {
		if c.content != nil && !c.analysed {
			return true
		}
	}
	return false
}

// Defect returns the first commit refusal for its content this loop saw, or nil: a
// defect to report (status, /healthz), not a reason to stop signing.
func (l *Loop) Defect() error {
	if p := l.defect.Load(); p != nil {
		return *p
	}
	return nil
}

// Unfit returns why this loop stopped signing for good (a content refusal no op
// explains), or nil. While set, the loop neither claims, renews nor signs.
func (l *Loop) Unfit() error {
	if p := l.unfit.Load(); p != nil {
		return *p
	}
	return nil
}

// refusedYetApplied handles a commit the leader's apply refused that the local chain
// holds at its seq. That is a divergence only when the local replica applied it in the
// very entry whose apply refused it. Copies of a commit's bytes are not rare: the
// transport resends a commit after a leader change, and the loop proposes an unsure
// commit again; a copy that reached the log before the commit's predecessor is
// refused (bad_prev or bad_seq, the head behind the commit's prev) while a later copy
// applies (the simulator's seeds 341617 and 363209). The entry that applied it is the
// one that first accepted its carried ops (IntentStatus); a commit that carries none
// (pending ops only) cannot be told apart, and is taken as applied, logged: a replica
// whose state differs from the others' is also found by the digest checks.
func (l *Loop) refusedYetApplied(c *inflight) {
	st, ok, err := l.firstStatus(c)
	switch {
	case l.knobs().TrustRefusal || err == nil && ok && st.Index == c.refusedAt:
		l.diverged(fmt.Errorf("the local replica applied commit seq %d epoch %d (index %d), which the leader's apply refused at index %d: this replica's state differs from the others'", c.seq, c.epoch, st.Index, c.refusedAt))
	case err != nil || !ok:
		l.log.Warn("a commit the leader refused applied on the local replica; which entry applied it is unknown, taken as another copy",
			"seq", c.seq, "epoch", c.epoch, "refused_at", c.refusedAt, "err", err)
	default:
		l.count(func(st *LoopStats) { st.SettledLocally++ })
		l.log.Info("a commit the leader refused applied on the local replica in a later copy", "seq", c.seq, "epoch", c.epoch,
			"refused_at", c.refusedAt, "applied_at", st.Index)
	}
}
