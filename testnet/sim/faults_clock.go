package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// FClockJump: one device's wall clock steps by minutes to days, forward or back (a
// wrong RTC at boot, a manual date, an NTP step after weeks offline); its monotonic
// clock is unaffected. Issue 19 item 2: a holder days fast made the dedupe window
// forget every acknowledged ID. The offset stays (like FClockStep's).
const FClockJump = "clockjump"

// Clock jumps are drawn log-uniformly between these.
const (
	minClockJump = time.Minute
	maxClockJump = 3 * 24 * time.Hour
)

// clockJump draws a jump: log-uniform in [minClockJump, maxClockJump], either sign.
func clockJump(rng *rand.Rand) time.Duration {
	lo, hi := math.Log(float64(minClockJump)), math.Log(float64(maxClockJump))
	d := time.Duration(math.Exp(lo + rng.Float64()*(hi-lo)))
	if rng.IntN(2) == 0 {
		d = -d
	}
	return d
}

func init() {
	// clocks: wall clocks that jump by minutes to days, both ways, with the faults
	// that change holders (so that a device with a jumped clock claims), and hasty
	// clients whose retries of IDs that landed must be answered as duplicates. One
	// seed in ten without a profile named runs it (seedProfile).
	profiles["clocks"] = Profile{Name: "clocks", FaultEvery: 700 * time.Millisecond,
		Weights: map[string]int{FClockJump: 4, FClockStep: 1, FCrash: 2, FTransfer: 2, FRelease: 1,
			FSteal: 1, FLeadership: 1, FDelay: 1, FPause: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3,
		HastyClients: 2, Hasty: time.Millisecond, HastyOutage: [2]time.Duration{200 * time.Millisecond, 2 * time.Second},
		HastyAt: time.Second,
		// Ten minutes of log time: most forward jumps pass it.
		Retention: 10 * time.Minute}
}

func init() {
	// flapping: the lease handed back and forth, about three times a second, between
	// devices whose wall clocks start up to 10 minutes apart and jump (minutes to
	// days), while hasty clients retry IDs that landed several seconds earlier. The
	// retention is short (16 s, so one bounded step of log time is 1 s, and the 1 s
	// TTL is the most a device may have for it, intentlog.CheckLeaseTTL; 12 s until
	// issue 38), and each retry must still be answered as a duplicate: a clock error
	// may only lengthen the retention. Found that log time
	// moved one full step at every handover from a slow clock to a fast one, so
	// handovers back and forth made the window forget acknowledged IDs (issue 19.2).
	profiles["flapping"] = Profile{Name: "flapping", FaultEvery: 150 * time.Millisecond,
		Weights: map[string]int{FClockJump: 1, FTransfer: 6, FSteal: 2, FCrash: 1},
		Clients: 3, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3,
		HastyClients: 3, Hasty: time.Millisecond, HastyOutage: [2]time.Duration{6 * time.Second, 9 * time.Second},
		HastyAt:   time.Second,
		Retention: 16 * time.Second, ClockSkew: 10 * time.Minute}
}
