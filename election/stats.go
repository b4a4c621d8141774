package election

import (
	"maps"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// Stats are the Lease's counters since New, for metrics and the state endpoint. The
// node wires them into its metrics; this package only counts.
type Stats struct {
	ClaimsProposed uint64 // ClaimEntry proposals by Claim (not Steal)
	Claims         uint64 // accepted claims
	LostRaces      uint64 // claims and steals rejected by the CAS
	RenewsProposed uint64
	Renews         uint64 // accepted renewals
	Releases       uint64 // accepted releases
	Transfers      uint64 // accepted transfers
	Steals         uint64 // accepted steals
	// Rejections counts every rejected lease entry by the apply's reason.
	Rejections map[intentlog.Reason]uint64
	// ProposeErrors counts proposals whose outcome is unknown (the Log returned an
	// error: timeout, no leader, cancelled context).
	ProposeErrors uint64
	HoldsStarted  uint64 // holds begun (one Lost channel each)
	HoldsEnded    uint64 // holds ended (Lost closed)
	// SkewSuspicions counts records on which the wall clocks disagreed with this
	// device's observation (counted once per record).
	SkewSuspicions uint64
	LastSkew       SkewReport
	// ClockAhead counts stamps of this device's holds that were clamped because its
	// wall clock had stepped ahead of its monotonic clock (see Lease.Stamp).
	ClockAhead     uint64
	LastClockAhead ClockAheadReport
}

// SkewReport is the last suspected-skew observation.
type SkewReport struct {
	At       time.Time     // this device's wall clock when it was noticed
	Holder   string        // the record's holder
	Epoch    uint64        // and epoch
	Observed time.Duration // how long the record had been observed unchanged
	WallAge  time.Duration // now - ts by this device's wall clock (< ttl: the disagreement)
}

func (s Stats) clone() Stats {
	s.Rejections = maps.Clone(s.Rejections)
	if s.Rejections == nil {
		s.Rejections = map[intentlog.Reason]uint64{}
	}
	return s
}
