package election

import (
	"fmt"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// Action is what the policy tells this device to do about the lease.
type Action uint8

const (
	// Wait: someone else holds a live lease (or it has not lapsed as far as this device
	// can tell), or this device is standing off after a release. Do not write.
	Wait Action = iota
	// Hold: this device holds the lease and no write is due.
	Hold
	// Renew: this device holds the lease and half the TTL (but less than the may-sign
	// window) has passed since its last successful lease write: write a RenewEntry.
	Renew
	// Claim: the lease is free (released, never held, lapsed, or an own record to
	// adopt): propose a ClaimEntry at epoch+1.
	Claim
)

// String returns "wait", "hold", "renew" or "claim".
func (a Action) String() string {
	switch a {
	case Wait:
		return "wait"
	case Hold:
		return "hold"
	case Renew:
		return "renew"
	case Claim:
		return "claim"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Why names the rule behind a Decision (stable strings, fit for logs and metrics).
type Why string

const (
	WhyVacant     Why = "vacant"      // never held: claim
	WhyReleased   Why = "released"    // released by its holder: claim at once
	WhyLive       Why = "live"        // another holder, observed unchanged for < ttl: wait
	WhySkew       Why = "skew"        // observed >= ttl but the wall clock disagrees, < 2*ttl: wait
	WhyLapsed     Why = "lapsed"      // observed >= ttl and now-ts >= ttl: claim
	WhyLapsedSkew Why = "lapsed_skew" // observed >= 2*ttl, wall clock still disagrees: claim
	WhyFresh      Why = "fresh"       // ours, < ttl/2 since our last successful write: hold
	WhyRenewDue   Why = "renew_due"   // ours, >= ttl/2 since our last successful write: renew
	WhyOwnLapsed  Why = "own_lapsed"  // ours, may-sign window over since our last write: claim epoch+1 (CAS)
	WhyAdopt      Why = "adopt"       // our ID, no memory of writing it (restart, transfer): claim epoch+1
	WhyStandoff   Why = "standoff"    // we released it ourselves a moment ago: let others claim
)

// Defaults and limits of the policy's tunables.
const (
	DefaultTTL          = 15 * time.Second
	DefaultSignFraction = 2.0 / 3.0
	// MaxSignFraction keeps the may-sign window well below the TTL: the rest of the
	// TTL is the margin for clock-rate differences and for the time between the
	// signer's Holds check and the apply of its commit.
	MaxSignFraction = 0.9
)

// Policy holds the lease's tunables. The zero value is not valid; use DefaultPolicy or
// fill both fields and call Validate.
type Policy struct {
	// TTL is used when the record carries none (vacant) and for this device's own
	// claims. Decisions about an existing record use the record's TTL: it is what its
	// holder promised to renew within.
	TTL time.Duration
	// SignFraction: the holder may sign while less than SignFraction*ttl has passed
	// since it proposed its last successful claim or renewal. In (1/2, MaxSignFraction]:
	// at or below 1/2 the window would close before the write-gated renewal is due.
	SignFraction float64
}

// DefaultPolicy returns {DefaultTTL, DefaultSignFraction}.
func DefaultPolicy() Policy {
	return Policy{TTL: DefaultTTL, SignFraction: DefaultSignFraction}
}

// Validate checks the tunables, including the rule that spans them.
func (p Policy) Validate() error {
	switch {
	case p.TTL < time.Millisecond:
		return fmt.Errorf("%w: ttl %v below 1ms", ErrBadOptions, p.TTL)
	case p.TTL%time.Millisecond != 0:
		return fmt.Errorf("%w: ttl %v is not whole milliseconds (the record stores ms)", ErrBadOptions, p.TTL)
	case !(p.SignFraction > 0.5 && p.SignFraction <= MaxSignFraction):
		return fmt.Errorf("%w: sign fraction %v outside (0.5, %v]", ErrBadOptions, p.SignFraction, MaxSignFraction)
	}
	return nil
}

// OwnWrite is this device's memory of the last successful lease write (claim or renew)
// that the current record reflects.
type OwnWrite struct {
	Valid bool
	Mono  time.Duration // monotonic reading just before the write was proposed
	Wall  time.Time     // wall reading at the same moment
}

// Input is everything the policy looks at. The policy reads no clock and does no I/O:
// the caller takes both clock readings once and passes them in.
type Input struct {
	Record intentlog.Lease // the locally applied __lease__ record
	Self   string          // this device's ID (libp2p peer ID)
	Now    time.Time       // wall clock
	Mono   time.Duration   // monotonic clock

	// FirstSeen is the monotonic reading at which this device first observed Record
	// (the exact record: holder, epoch, ts, ttl) and has seen it unchanged since.
	FirstSeen time.Duration
	// Previous is the record observed before Record, if HavePrevious.
	Previous     intentlog.Lease
	HavePrevious bool

	// Own is set when Record names Self and matches a write this device proposed and
	// knows succeeded (the Result said accepted, or the record shows its exact ts).
	Own OwnWrite
	// EverHeld: this process has had a lease write accepted since it started.
	EverHeld bool
	// Standoff: no ordinary claim before Mono reaches this reading (0: none). Set for
	// one TTL after this device releases the lease, so a standby can take it.
	Standoff time.Duration
}

// Decision is the policy's answer.
type Decision struct {
	Action Action
	Why    Why
	// MaySign: this device holds the lease and its may-sign window is open. Only
	// meaningful with Action Hold or Renew.
	MaySign bool
	// SignUntil is the monotonic reading at which the may-sign window closes (when
	// MaySign).
	SignUntil time.Duration
	// SuspectedSkew: the record has been observed unchanged for >= ttl but the wall
	// clock says it is younger than ttl (its holder's clock is ahead of ours, or ours
	// is behind): the claim is delayed, at most until 2*ttl observed.
	SuspectedSkew bool
	// TTL is the TTL the decision used (the record's, else the policy's).
	TTL time.Duration
	// Observed is how long Record has been observed unchanged (Mono - FirstSeen).
	Observed time.Duration
	// WallAge is Now - Record.TS (negative when ts is in our future).
	WallAge time.Duration
	// SinceWrite is the time since our last successful write, when Own.Valid: the
	// larger of the monotonic and the wall elapsed time.
	SinceWrite time.Duration
	// Wake is the monotonic reading at which the decision may next change if the
	// record does not change: a loop can sleep until then (or until the record
	// changes) instead of a whole tick. Equal to Mono when the action is due now.
	Wake time.Duration
	// Mono is the monotonic reading the decision was made at (Input.Mono).
	Mono time.Duration
	// Expires is the monotonic reading at which the lease ends as this device's
	// policy sees it, if the record does not change: for another device's lease, the
	// earliest moment this device may claim it (observed unchanged for a ttl and the
	// wall clock agreeing, or 2*ttl observed); for this device's own hold, the moment
	// its may-sign window closes. Mono when the lease is free or lapsed already. It
	// ignores this device's own release standoff. Use it (ExpiresIn), not ts + ttl on
	// the wall clock, to say when a lease expires: the wall clocks of two devices may
	// disagree, and the observation guard is what decides.
	Expires time.Duration
}

// ExpiresIn is Expires relative to the decision's time: how long until the lease ends
// as this device's policy sees it (0 when free or lapsed).
func (d Decision) ExpiresIn() time.Duration {
	if d.Expires <= d.Mono {
		return 0
	}
	return d.Expires - d.Mono
}

// Holding reports whether the decision says this device holds the lease and may sign.
func (d Decision) Holding() bool {
	return (d.Action == Hold || d.Action == Renew) && d.MaySign
}

// WakeIn returns how long after mono the decision may change (0 if due already).
func (d Decision) WakeIn(mono time.Duration) time.Duration {
	if d.Wake <= mono {
		return 0
	}
	return d.Wake - mono
}

// CheckTiming refuses lease timing under which a hold's may-sign window is too short
// for one proposal: the signer loop's tick and the timeout of one lease proposal must
// each be at most a third of the TTL. The holder renews once half the TTL has passed
// and stops signing at SignFraction*ttl (2/3 by default): a tick or a proposal longer
// than a third leaves a holder renewing too late, or signing on a renewal it could not
// have completed, on every hold. Call it when the node's config is validated.
func CheckTiming(ttl, tick, proposeTimeout time.Duration) error {
	third := ttl / 3
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: ttl %v must be positive", ErrBadOptions, ttl)
	case tick <= 0:
		return fmt.Errorf("%w: tick %v must be positive", ErrBadOptions, tick)
	case proposeTimeout <= 0:
		return fmt.Errorf("%w: proposal timeout %v must be positive", ErrBadOptions, proposeTimeout)
	case tick > third:
		return fmt.Errorf("%w: tick %v is above a third of the ttl %v (%v): a hold's window would be too short for one proposal", ErrBadOptions, tick, ttl, third)
	case proposeTimeout > third:
		return fmt.Errorf("%w: proposal timeout %v is above a third of the ttl %v (%v): a hold's window would be too short for one proposal", ErrBadOptions, proposeTimeout, ttl, third)
	}
	return nil
}

// RecordTTL returns the TTL a decision about rec uses: the record's, or fallback when
// the record carries none.
func RecordTTL(rec intentlog.Lease, fallback time.Duration) time.Duration {
	if rec.TTL > 0 {
		return time.Duration(rec.TTL) * time.Millisecond
	}
	return fallback
}

// Decide applies the lease rules (see the package documentation for each rule and the
// reason behind it). It is a pure function of p and in.
func (p Policy) Decide(in Input) Decision {
	rec := in.Record
	ttl := RecordTTL(rec, p.TTL)
	d := Decision{
		TTL:      ttl,
		Observed: in.Mono - in.FirstSeen,
		Wake:     in.Mono,
		Mono:     in.Mono,
		Expires:  in.Mono,
	}
	if d.Observed < 0 {
		d.Observed = 0
	}
	if rec.Holder != "" || rec.TS != 0 {
		d.WallAge = in.Now.Sub(time.UnixMilli(rec.TS))
	}

	// Free: released or never held. No timing rule applies: the holder gave it up.
	if rec.Holder == "" {
		d.Action, d.Why = Claim, WhyReleased
		if rec.Epoch == 0 {
			d.Why = WhyVacant
		}
		return p.standoff(in, d)
	}

	// Ours, and we remember writing it.
	if rec.Holder == in.Self && in.Own.Valid {
		since := in.Mono - in.Own.Mono
		if wall := in.Now.Sub(in.Own.Wall); wall > since {
			// The wall clock ran on while the monotonic clock did not (a suspended
			// laptop): trust the larger.
			since = wall
		}
		if since < 0 {
			since = 0
		}
		d.SinceWrite = since
		window := time.Duration(p.SignFraction * float64(ttl))
		if since < window {
			d.MaySign = true
			d.SignUntil = in.Mono + (window - since)
			d.Expires = d.SignUntil
		}
		switch {
		case since >= window:
			// Renew only inside the window. Past it, others (whose clocks may run
			// faster than ours) may already see the lease lapsed and be claiming; a
			// renewal landing between their observation and their CAS would leave two
			// devices believing they hold it. Compete for epoch+1 through the CAS.
			d.Action, d.Why = Claim, WhyOwnLapsed
		case since >= ttl/2:
			d.Action, d.Why = Renew, WhyRenewDue
		default:
			d.Action, d.Why = Hold, WhyFresh
			d.Wake = in.Mono + (ttl/2 - since)
			if d.MaySign && d.SignUntil < d.Wake {
				d.Wake = d.SignUntil
			}
		}
		return d
	}

	// Our ID but no memory of writing it: a previous incarnation of this process, or a
	// transfer to us. Adopt it by a CAS claim at epoch+1 (fencing whatever the earlier
	// writer had in flight), but only when that is what the evidence says; otherwise it
	// is treated like anyone else's lease (see the package documentation).
	if rec.Holder == in.Self {
		transfer := in.HavePrevious && in.Previous.Holder != "" && in.Previous.Holder != in.Self &&
			in.Previous.Epoch+1 == rec.Epoch
		if transfer {
			// A transfer names us explicitly: our own release standoff (meant to let
			// others claim a lease we gave up) does not apply to it.
			d.Action, d.Why = Claim, WhyAdopt
			return d
		}
		if !in.EverHeld {
			d.Action, d.Why = Claim, WhyAdopt
			return p.standoff(in, d)
		}
	}

	// Someone else's lease (or an own record we cannot vouch for).
	wallAgrees := d.WallAge >= ttl
	// When it lapses for us, if it stays unchanged: observed for a ttl and the wall
	// clock agreeing, or observed for 2*ttl whatever the wall clock says.
	byWall := in.Mono + (ttl - d.WallAge)
	d.Expires = max(in.FirstSeen+ttl, min(byWall, in.FirstSeen+2*ttl), in.Mono)
	switch {
	case d.Observed >= ttl && wallAgrees:
		d.Action, d.Why = Claim, WhyLapsed
	case d.Observed >= 2*ttl:
		d.Action, d.Why, d.SuspectedSkew = Claim, WhyLapsedSkew, true
	case d.Observed >= ttl:
		d.Action, d.Why, d.SuspectedSkew = Wait, WhySkew, true
		d.Wake = in.FirstSeen + 2*ttl
		if byWall < d.Wake {
			d.Wake = byWall
		}
	default:
		d.Action, d.Why = Wait, WhyLive
		d.Wake = in.FirstSeen + ttl
	}
	if d.Action == Claim {
		return p.standoff(in, d)
	}
	return d
}

// standoff turns an ordinary claim into a wait while this device stands off.
func (p Policy) standoff(in Input, d Decision) Decision {
	if d.Action == Claim && in.Mono < in.Standoff {
		d.Action, d.Why = Wait, WhyStandoff
		d.Wake = in.Standoff
	}
	return d
}
