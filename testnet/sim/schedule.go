package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// action is one step of a fault schedule. The schedule is a pure function of the
// seed and the run's shape (devices, profile, duration, TTL): a replay runs the same
// actions at the same virtual times. Targets given as Holder or Leader are resolved
// when the action runs (who holds the lease then), so they can land on another
// device in a replay whose interleaving differs.
type action struct {
	ID     int
	At     time.Duration
	Kind   string
	Heal   int // > 0: this action undoes fault Heal
	Target Target
	Dev    int // AnyDevice target (fixed at generation), or -1
	Dur    time.Duration
	Links  [][2]int
	// DevLinks: the link fault applies to the target device's links, outgoing
	// (linksOut), incoming (linksIn) or both, resolved when the action runs.
	DevLinks uint8
	Faults   linkFaults
	Step     time.Duration // clock step
	Rate     float64       // clock rate
	Mono     bool          // pause: SIGSTOP (true: Mono catches up) or suspend (false)
	Damage   string        // power cut: what becomes of state.db; disk: diskDamages
	Frac     float64       // power cut "truncate": fraction of the file kept
	N        int           // burst size
	Seed     uint64        // for choices made when the action runs
}

func (a action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", a.Kind)
	if a.Heal > 0 {
		return fmt.Sprintf("heal #%d", a.Heal)
	}
	switch a.Target {
	case Holder:
		b.WriteString(" holder")
	case Leader:
		b.WriteString(" leader")
	default:
		if a.Dev >= 0 {
			fmt.Fprintf(&b, " dev%d", a.Dev)
		}
	}
	switch a.DevLinks {
	case linksOut:
		b.WriteString(" outgoing")
	case linksIn:
		b.WriteString(" incoming")
	case linksOut | linksIn:
		b.WriteString(" links")
	}
	if len(a.Links) > 0 {
		b.WriteString(" links")
		for _, l := range a.Links {
			fmt.Fprintf(&b, " %d>%d", l[0], l[1])
		}
	}
	f := a.Faults
	if f.Delay > 0 || f.Jitter > 0 {
		fmt.Fprintf(&b, " delay=%v+%v", f.Delay, f.Jitter)
	}
	if f.Loss > 0 {
		fmt.Fprintf(&b, " loss=%.2f", f.Loss)
	}
	if f.Dup > 0 {
		fmt.Fprintf(&b, " dup=%.2f", f.Dup)
	}
	if f.Reorder {
		b.WriteString(" reorder")
	}
	if f.Cut {
		b.WriteString(" cut")
	}
	if f.FwdDelay > 0 {
		fmt.Fprintf(&b, " fwd+%v", f.FwdDelay)
	}
	if a.Step != 0 {
		fmt.Fprintf(&b, " step=%v", a.Step)
	}
	if a.Rate != 0 {
		fmt.Fprintf(&b, " rate=%.3f", a.Rate)
	}
	if a.Kind == FPause {
		if a.Mono {
			b.WriteString(" sigstop")
		} else {
			b.WriteString(" suspend")
		}
	}
	if a.Kind == FDisk {
		fmt.Fprintf(&b, " damage=%s", a.Damage)
	} else if a.Damage != "" {
		fmt.Fprintf(&b, " state.db=%s", a.Damage)
	}
	if a.N > 0 {
		fmt.Fprintf(&b, " n=%d", a.N)
	}
	if a.Dur > 0 {
		fmt.Fprintf(&b, " for %v", a.Dur.Round(time.Millisecond))
	}
	return b.String()
}

// DevLinks bits.
const (
	linksOut uint8 = 1 << iota
	linksIn
)

// Action kinds besides the faults.
const (
	aHeal  = "heal"
	aFlush = "flush" // the page cache writes state.db out: a power cut rolls back to this copy
)

// Where the IDs of flush and heal actions start (fault IDs count from 1; a heal's
// is healIDs + its fault's).
const (
	flushIDs = 1 << 20
	healIDs  = 2 << 20
)

// makeSchedule draws the schedule of one run. A shorter dur gives a prefix of a
// longer one's faults (but for the heals past its end).
func makeSchedule(seed int64, devices int, p Profile, dur, ttl time.Duration) []action {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5c4ed))
	var acts []action
	id := 0
	add := func(a action) *action {
		id++
		a.ID = id
		a.Seed = rng.Uint64()
		acts = append(acts, a)
		return &acts[len(acts)-1]
	}
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	ttlTimes := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(ttl))
	}
	target := func() (Target, int) {
		switch x := rng.IntN(10); {
		case x < 5:
			return Holder, -1
		case x < 7:
			return Leader, -1
		}
		return AnyDevice, rng.IntN(devices)
	}
	allLinks := func() [][2]int {
		var ls [][2]int
		for a := range devices {
			for b := range devices {
				if a != b {
					ls = append(ls, [2]int{a, b})
				}
			}
		}
		return ls
	}

	// The page cache writes state.db out now and then: what a power cut rolls back
	// to (a copy of a file bbolt grows by 16 MB costs real time: only when power cuts
	// can come, and rarely). From a stream of its own, so that the faults drawn below
	// do not depend on how many flushes fit in dur.
	if p.Weights[FPowerCut] > 0 && p.FaultEvery > 0 {
		frng := rand.New(rand.NewPCG(uint64(seed), 0xf1a5))
		fid := flushIDs
		for d := range devices {
			for t := time.Second + time.Duration(frng.Int64N(int64(4*time.Second))); t < dur; t += 5*time.Second + time.Duration(frng.Int64N(int64(5*time.Second))) {
				fid++
				acts = append(acts, action{ID: fid, At: t, Kind: aFlush, Dev: d})
			}
		}
	}

	var kinds []string
	total := 0
	for k, w := range p.Weights {
		if w > 0 {
			kinds = append(kinds, k)
			total += w
		}
	}
	sort.Strings(kinds) // map order must not leak into the schedule
	if p.FaultEvery <= 0 || total == 0 {
		sortActions(acts)
		return acts
	}
	pick := func() string {
		x := rng.IntN(total)
		for _, k := range kinds {
			if x < p.Weights[k] {
				return k
			}
			x -= p.Weights[k]
		}
		return kinds[len(kinds)-1]
	}
	warmup := 2 * ttl
	for t := warmup + time.Duration(rng.ExpFloat64()*float64(p.FaultEvery)); t < dur; t += time.Duration(rng.ExpFloat64() * float64(p.FaultEvery)) {
		k := pick()
		a := action{At: t, Kind: k, Dev: -1}
		switch k {
		case FDelay:
			a.Dur = between(time.Second, 4*time.Second)
			a.Faults = linkFaults{Delay: between(50*time.Millisecond, 400*time.Millisecond), Jitter: between(0, 50*time.Millisecond)}
			if rng.IntN(2) == 0 {
				a.Target, a.Dev = target()
				a.DevLinks = linksOut | linksIn
			} else {
				x, y := rng.IntN(devices), rng.IntN(devices-1)
				if y >= x {
					y++
				}
				a.Links = [][2]int{{x, y}}
			}
		case FLoss:
			a.Dur = between(500*time.Millisecond, 3*time.Second)
			a.Faults = linkFaults{Loss: 0.05 + 0.45*rng.Float64()}
			a.Target, a.Dev = target()
			a.DevLinks = linksOut | linksIn
		case FDup:
			a.Dur = between(time.Second, 4*time.Second)
			a.Faults = linkFaults{Dup: 0.05 + 0.25*rng.Float64()}
			a.Links = allLinks()
		case FReorder:
			a.Dur = between(time.Second, 4*time.Second)
			a.Faults = linkFaults{Reorder: true, Jitter: between(5*time.Millisecond, 50*time.Millisecond)}
			a.Links = allLinks()
		case FPartition:
			a.Dur = between(500*time.Millisecond, 3*time.Second)
			perm := rng.Perm(devices)
			k := 1 + rng.IntN(devices/2)
			side := map[int]bool{}
			for _, d := range perm[:k] {
				side[d] = true
			}
			for x := range devices {
				for y := range devices {
					if x != y && side[x] != side[y] {
						a.Links = append(a.Links, [2]int{x, y})
					}
				}
			}
			a.Faults = linkFaults{Cut: true}
		case FOneWay:
			a.Dur = between(500*time.Millisecond, 3*time.Second)
			a.Faults = linkFaults{Cut: true}
			if rng.IntN(2) == 0 { // a device that can send but not hear (or the reverse)
				a.Target, a.Dev = target()
				a.DevLinks = linksOut
				if rng.IntN(2) == 0 {
					a.DevLinks = linksIn
				}
			} else {
				ls := allLinks()
				rng.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
				a.Links = ls[:1+rng.IntN(min(3, len(ls)))]
			}
		case FSlowFwd:
			a.Dur = between(time.Second, 4*time.Second)
			lo, hi, all := 0.3, 1.5, 1.0/3
			if p.SlowFwd[1] > 0 {
				lo, hi, all = p.SlowFwd[0], p.SlowFwd[1], p.SlowFwdAll
			}
			a.Faults = linkFaults{FwdDelay: ttlTimes(lo, hi)}
			switch {
			case rng.Float64() < all: // every device's proposals late (and its barriers)
				a.Links = allLinks()
			case p.SlowFwd[1] > 0: // the holder's renewals late
				a.Target, a.DevLinks = Holder, linksOut
			default:
				a.Target, a.Dev = target()
				a.DevLinks = linksOut
			}
		case FLateRenew:
			a.Dur = ttlTimes(2, 3)
			a.Target = Holder
			a.Faults = linkFaults{FwdDelay: ttlTimes(0.51, 0.53)}
		case FCrash, FPowerCut:
			a.Dur = between(300*time.Millisecond, 3*time.Second)
			a.Target, a.Dev = target()
			if k == FPowerCut {
				switch x := rng.IntN(4); x {
				case 0:
					a.Damage = "rollback"
				case 1:
					a.Damage, a.Frac = "truncate", rng.Float64()
				case 2:
					a.Damage = "delete"
				default:
					a.Damage = "keep"
				}
			}
		case FDisk:
			a.Dur = between(time.Second, 4*time.Second)
			a.Target, a.Dev = target()
			a.Damage = diskDamage(rng)
		case FRepair, FLostDB, FRestore, FRepairBehind, FRepairMajority:
			diskAction(&a, rng, target)
		case FBackup, FTimeTravel, FTimeTravelWhole, FClone:
			timeTravelAction(&a, rng, target)
		case FPause:
			a.Dur = ttlTimes(1.2, 3)
			a.Target, a.Dev = target()
			a.Mono = rng.IntN(2) == 0
		case FClockStep:
			a.Dev = rng.IntN(devices)
			a.Step = ttlTimes(1.2, 3)
			if rng.IntN(2) == 0 {
				a.Step = -a.Step
			}
		case FClockJump: // faults_clock.go
			a.Dev = rng.IntN(devices)
			a.Step = clockJump(rng)
		case FClockRate:
			a.Dur = between(2*time.Second, 6*time.Second)
			a.Dev = rng.IntN(devices)
			a.Rate = 0.9 + 0.2*rng.Float64()
		case FRelease, FTransfer:
			a.Target = Holder
		case FSteal:
			a.Target = AnyDevice
		case FRemove:
			a.Dur = between(time.Second, 4*time.Second)
			a.Target, a.Dev = target()
		case FLeadership:
			a.Target = Leader
		case FBurst:
			a.Dev = rng.IntN(devices)
			a.N = 50 + rng.IntN(250)
		}
		f := add(a)
		if f.Dur > 0 && t+f.Dur < dur {
			// Not from rng nor the fault IDs: whether a heal fits in dur must not
			// change the faults after it.
			acts = append(acts, action{ID: healIDs + f.ID, At: t + f.Dur, Kind: aHeal, Heal: f.ID, Dev: -1})
		}
	}
	sortActions(acts)
	return acts
}

func sortActions(acts []action) {
	sort.SliceStable(acts, func(i, j int) bool {
		if acts[i].At != acts[j].At {
			return acts[i].At < acts[j].At
		}
		return acts[i].ID < acts[j].ID
	})
}
