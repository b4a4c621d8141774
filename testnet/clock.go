package testnet

import "github.com/batonhq/baton/internal/devclock"

// Clock is one device's controllable clock (see devclock): skew, rate and pauses on
// the system clock. A drill's pause is a suspended machine: on Resume(false) the wall
// reading catches up, the monotonic one does not count the pause.
type Clock = devclock.Clock

// NewClock returns a Clock reading the system time, rate 1, no offset.
func NewClock() *Clock { return devclock.New() }
