package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Fault kinds: what the schedule injects. Each has a heal (or a restart) that the
// schedule places after it; everything is healed when the fault phase ends.
const (
	FDelay      = "delay"      // slow links: one device's links, or one link (50-400 ms)
	FLoss       = "loss"       // lossy links (5-50%)
	FDup        = "dup"        // duplicating links (5-30%)
	FReorder    = "reorder"    // links that reorder (no FIFO) with a jitter
	FPartition  = "partition"  // the devices split in two groups, both ways
	FOneWay     = "oneway"     // one or more links cut in one direction only
	FSlowFwd    = "slowfwd"    // one device's forwarded proposals delayed 0.3-1.5 TTL (late proposals)
	FLateRenew  = "laterenew"  // the holder's renewals half a TTL late, the leader's wall clock behind (bug b's race)
	FCrash      = "crash"      // kill -9 (and a restart on the same data dir)
	FPowerCut   = "powercut"   // machine crash: state.db rolled back, torn or kept, no clean marker
	FPause      = "pause"      // SIGSTOP-like pause or a suspend, 1.2-3 TTL
	FClockStep  = "clockstep"  // the wall clock steps 1.2-3 TTL forward or back
	FClockRate  = "clockrate"  // the clocks run at 0.9x-1.1x
	FRelease    = "release"    // the holder releases the lease (graceful handover)
	FTransfer   = "transfer"   // the holder transfers the lease to a named member
	FSteal      = "steal"      // an operator steals the lease
	FRemove     = "remove"     // a member is removed from the Raft configuration (and re-joins)
	FLeadership = "leadership" // a Raft leadership transfer
	FBurst      = "burst"      // a burst of submissions to one device
)

// Target says which device a device fault picks when it runs.
type Target uint8

const (
	AnyDevice Target = iota
	Holder           // the lease holder, if one is known
	Leader           // the Raft leader
)

// Profile is a fault mix and a load. The profiles are named; a run's profile is part
// of its replay command.
type Profile struct {
	Name string
	// Duration is the fault phase of a run of this profile when the Config sets none
	// (0: DefaultDuration).
	Duration time.Duration
	// FaultEvery is the mean time between faults (exponential); 0 means none.
	FaultEvery time.Duration
	// Weights of the fault kinds.
	Weights map[string]int
	// Clients submit one intent at a time with a think time of mean Think between
	// intents, retrying the same ID after an error (backoff 20-500 ms) until it is
	// acknowledged. Their Submit timeout is drawn from Timeout; WaitSigned is the
	// share of submissions that wait for the signature.
	Clients    int
	Think      time.Duration
	Timeout    [2]time.Duration
	WaitSigned float64
	// After an error, a client goes quiet for an outage drawn from Outage with
	// probability OutageP before it retries (a laptop closed mid-request).
	OutageP float64
	Outage  [2]time.Duration
	// SlowFwd is the range of a late-proposal fault's delay, in TTLs (each message
	// gets 0.5-1.5 times a draw from it), and SlowFwdAll the share of those faults
	// that slow every device's proposals; the others slow the holder's. Unset: 0.3-1.5
	// TTL, a third of them everyone's, the others a device's as other faults pick it.
	SlowFwd    [2]float64
	SlowFwdAll float64
	// Bulk goroutines submit back to back without thinking, until BulkIntents intents
	// were acknowledged (0: for the whole fault phase).
	Bulk        int
	BulkIntents int
	BulkAt      time.Duration // when the bulk load starts
	// Hasty clients submit with a timeout of Hasty (shorter than a Raft round: they
	// always time out, and the intent lands anyway), then go quiet for HastyOutage,
	// or, with HastyAfter, until that many other intents were acknowledged (capped at
	// the fault phase), before they retry the same ID.
	HastyClients int
	Hasty        time.Duration
	HastyOutage  [2]time.Duration
	HastyAfter   int
	HastyAt      time.Duration // when the hasty clients start
	// OddClients send every kind of input the API accepts, the apply's refusals
	// included (inputs.go).
	OddClients int
	// Retention is the genesis's dedupe retention (0: the node's default, 24 h).
	Retention time.Duration
	// ClockSkew bounds the wall clock offsets the devices start with (format.go; 0:
	// none, or on an atproto run 2 minutes).
	ClockSkew time.Duration
	// FounderAlone: dev0 bootstraps alone, signs, is stopped and copied (the
	// founder's backup from before anyone joined), starts again, and the others
	// join; the fault phase starts after that (faults_timetravel.go).
	FounderAlone bool
}

var profiles = map[string]Profile{
	// calm: load, no faults. Every signed commit must be applied.
	"calm": {Name: "calm", Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{2 * time.Second, 4 * time.Second}, WaitSigned: 0.3},
	// mixed: every kind of fault, about one a second.
	"mixed": {Name: "mixed", FaultEvery: 700 * time.Millisecond,
		Weights: map[string]int{FDelay: 3, FLoss: 3, FDup: 2, FReorder: 2, FPartition: 3, FOneWay: 2,
			FSlowFwd: 3, FCrash: 3, FPowerCut: 2, FPause: 3, FClockStep: 2, FClockRate: 2, FRelease: 2,
			FTransfer: 2, FSteal: 1, FRemove: 1, FLeadership: 2, FBurst: 2, FLateRenew: 2},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3,
		OutageP: 0.05, Outage: [2]time.Duration{500 * time.Millisecond, 3 * time.Second}},
	// late: proposals delayed past their callers' deadlines, clock rates, pauses:
	// what it takes for a renewal to land after a standby's read barrier.
	"late": {Name: "late", FaultEvery: 500 * time.Millisecond,
		// Leadership and lease transfers make holders that do not lead Raft (whose
		// renewals are forwarded, so can be late).
		Weights: map[string]int{FLateRenew: 6, FSlowFwd: 2, FLeadership: 2, FTransfer: 2, FClockRate: 1, FDelay: 1, FPause: 1},
		// A renewal must land after a standby's read barrier and before its claim:
		// the holder's, about half a TTL late, with a holder and a standby that do not
		// lead Raft (the leader sees a record first, so a standby with a faster clock
		// or a leader whose wall clock disagrees).
		SlowFwd: [2]float64{0.4, 0.8},
		Clients: 4, Think: 60 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.2},
	// laterenew: only bug b's race, one at a time.
	"laterenew": {Name: "laterenew", Duration: 30 * time.Second, FaultEvery: 3 * time.Second,
		Weights: map[string]int{FLateRenew: 1},
		Clients: 3, Think: 60 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.2},
	// dedupe: a long bulk load that pushes more than intentlog.DedupeWindow (65,536)
	// IDs through while hasty clients wait to retry IDs that landed long before.
	"dedupe": {Name: "dedupe", Duration: 15 * time.Second, Clients: 0, Bulk: 256, BulkIntents: 75_000,
		Timeout: [2]time.Duration{5 * time.Second, 5 * time.Second},
		BulkAt:  3 * time.Second, HastyClients: 4, Hasty: time.Millisecond, HastyAfter: 68_000, HastyAt: 2 * time.Second},
	// dedupe-small: the same with a small bulk load, for a small count-only dedupe
	// window (knob dedupe-count=64).
	"dedupe-small": {Name: "dedupe-small", Duration: 10 * time.Second, Clients: 2, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{2 * time.Second, 2 * time.Second},
		Bulk:    16, BulkIntents: 3000,
		BulkAt: 3 * time.Second, HastyClients: 4, Hasty: time.Millisecond, HastyAfter: 200, HastyAt: 2 * time.Second},
}

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string {
	var out []string
	for n := range profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LookupProfile returns the named profile.
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("sim: unknown profile %q (have %s)", name, strings.Join(ProfileNames(), ", "))
	}
	return p, nil
}

// seedProfile is the profile of a seed run without one named: one seed in ten runs
// without faults (where nothing signed may be refused), one in twenty with clocks that
// jump by minutes to days, one in twenty with the lease handed back and forth between
// clocks apart (flapping), one in twenty with disks that go back in time after a
// founder that started alone (timetravel), the rest the mixed bag.
func seedProfile(seed int64) string {
	if seed%10 == 0 {
		return "calm"
	}
	if seed%20 == 13 {
		return "timetravel" // faults_timetravel.go
	}
	if seed%20 == 15 {
		return "flapping" // faults_clock.go
	}
	if seed%10 == 5 {
		return "clocks" // faults_clock.go
	}
	return "mixed"
}
