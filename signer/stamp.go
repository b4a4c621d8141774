package signer

// stamper is an optional capability of a Lease (*election.Lease has it): the timestamp
// the holder puts on a commit, which does not follow a wall clock that stepped ahead
// during the hold (see election.Lease.Stamp). Without it the commit carries the
// loop's wall clock.
type stamper interface {
	Stamp() int64
}

// stamp is the time of a commit signed now (unix ms).
func (l *Loop) stamp() int64 {
	if s, ok := l.cfg.Lease.(stamper); ok {
		return s.Stamp()
	}
	return l.cfg.Clock.Now().UnixMilli()
}
