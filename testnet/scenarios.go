package testnet

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenario is one drill: a fault pattern repeated for a number of rounds (or until
// a duration is up) while load runs. Step runs one round on a started network whose
// lease is held.
type Scenario struct {
	Name        string
	Description string
	// FaultFree: the drill injects nothing, so every commit the chain key signs must
	// be applied (a signed-but-refused commit is a finding).
	FaultFree bool
	// Procs: the scenario runs over processes too (it needs only Net's own faults).
	Procs bool
	// Pending names a known failure (an issue) that keeps the scenario out of `all`
	// until it is fixed; run it by name.
	Pending string
	Step    func(ctx context.Context, d *Drill, round int) error
}

// Scenarios lists the drills `baton drill --scenario NAME` knows, in `all` order.
var Scenarios = []Scenario{
	{Name: "kill-holder", Procs: true,
		Description: "kill -9 the lease holder (no release), wait for a standby to take over and sign, restart it from its data dir and let it catch up",
		Step:        func(ctx context.Context, d *Drill, _ int) error { return faultKill(ctx, d, true) }},
	{Name: "pause-holder", Procs: true,
		Description: "freeze the holder (in-process: network cut both ways, proposals parked mid-flight, clock stopped; a process: SIGSTOP) for 2×TTL, wait for a takeover, resume it: its stale proposals must be fenced off",
		Step:        func(ctx context.Context, d *Drill, _ int) error { return faultPause(ctx, d, true) }},
	{Name: "partition-holder",
		Description: "cut the holder off in a minority partition, wait for the majority to elect a new holder and sign, heal",
		Step:        func(ctx context.Context, d *Drill, _ int) error { return faultPartition(ctx, d, true) }},
	{Name: "skew",
		Description: "skew one standby's wall clock by ±1.5×TTL and make another drift 10% fast, then kill the holder: takeover within 2×TTL, no fork; clocks restored",
		Step:        func(ctx context.Context, d *Drill, _ int) error { return faultSkew(ctx, d, true) }},
	{Name: "rolling-restart", Procs: true,
		Description: "stop (graceful, releasing; SIGTERM for a process) and restart every device in turn, the holder last",
		Step:        stepRollingRestart},
	{Name: "release-handover", Procs: true,
		Description: "the holder releases the lease (a standby claims at once), then the new holder transfers it to a named device",
		Step: func(ctx context.Context, d *Drill, _ int) error {
			if err := faultRelease(ctx, d, true); err != nil {
				return err
			}
			return faultTransfer(ctx, d, true)
		}},
	{Name: "churn", Procs: true,
		Description: "a standby leaves the cluster (Raft membership change), then its slot rejoins as an operator re-adds a device (state wiped, keys kept, a fresh invite) and catches up",
		Step:        func(ctx context.Context, d *Drill, _ int) error { return faultChurn(ctx, d, false) }},
	{Name: "load", Procs: true, FaultFree: true,
		Description: "no fault: every device submits concurrently at --rate for 3 s per round; every signed commit must be applied",
		Step:        stepLoad},
	{Name: SoakScenario, Procs: true,
		Description: "every fault kind at random (seeded), one at a time, for --rounds or until --duration is up",
		Step:        stepSoak},
}

// SoakScenario is the name of the random fault mix (--duration runs it).
const SoakScenario = "soak"

// ScenarioNames returns the names of Scenarios.
func ScenarioNames() []string {
	var out []string
	for _, s := range Scenarios {
		out = append(out, s.Name)
	}
	return out
}

// AllScenarios are what `all` runs: every scenario but the soak and the pending
// ones (in procs mode, those that run over processes).
func AllScenarios(procs bool) []string {
	var out []string
	for _, s := range Scenarios {
		if s.Name != SoakScenario && s.Pending == "" && (!procs || s.Procs) {
			out = append(out, s.Name)
		}
	}
	return out
}

// LookupScenario returns the named scenario.
func LookupScenario(name string) (Scenario, error) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("%w: %q (known: %s, all)", ErrUnknownScenario, name, strings.Join(ScenarioNames(), ", "))
}

// Fault kinds: what a Round did.
const (
	FaultKill      = "kill"              // Node.Kill / kill -9, then restart
	FaultPause     = "pause"             // freeze / SIGSTOP for 2×TTL, then resume
	FaultPartition = "partition"         // the holder in a minority, then heal
	FaultPartial   = "partial-partition" // the holder cut from one standby only, then heal
	FaultSkew      = "skew"              // a standby skewed, another drifting, the holder killed
	FaultRestart   = "restart"           // graceful stop (SIGTERM), then restart
	FaultRelease   = "release"           // the holder releases
	FaultTransfer  = "transfer"          // the holder transfers to a named device
	FaultChurn     = "churn"             // leave, then rejoin the same slot
)

// pick chooses the round's target: the holder, or (onHolder false, or by chance in
// a soak) a running standby; it returns the holder's epoch too.
func (d *Drill) pick(ctx context.Context, onHolder bool, ok func(*Device) bool) (t *Device, ep uint64, isHolder bool, err error) {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	if onHolder {
		return h, ep, true, nil
	}
	var cands []*Device
	for _, x := range d.others(h) {
		if !x.Paused() && (ok == nil || ok(x)) {
			cands = append(cands, x)
		}
	}
	if len(cands) == 0 {
		return h, ep, true, nil
	}
	return cands[d.Rand.Intn(len(cands))], ep, false, nil
}

func faultKill(ctx context.Context, d *Drill, onHolder bool) error {
	t, ep, isHolder, err := d.pick(ctx, onHolder, nil)
	if err != nil {
		return err
	}
	r := d.begin(FaultKill, t, isHolder, ep)
	return d.back(ctx, r, t, isHolder, d.Net.Kill(t))
}

// back ends a round whose fault took t down (err: how that went): a takeover when t
// held the lease, t's restart from its data dir, its catch-up.
func (d *Drill) back(ctx context.Context, r *Round, t *Device, isHolder bool, err error) error {
	if err == nil && isHolder {
		err = d.takeover(ctx, r, t)
	}
	if err == nil {
		err = d.Net.Restart(ctx, t)
	}
	if err == nil {
		err = d.catchUp(ctx, r, t)
	}
	return d.end(r, err)
}

func faultPause(ctx context.Context, d *Drill, onHolder bool) error {
	t, ep, isHolder, err := d.pick(ctx, onHolder, nil)
	if err != nil {
		return err
	}
	r := d.begin(FaultPause, t, isHolder, ep)
	if err := d.Net.Pause(t); err != nil {
		return d.end(r, err)
	}
	if isHolder {
		err = d.takeover(ctx, r, t)
	}
	// Stay frozen for 2×TTL in all (the fault's length, not a synchronisation),
	// then resume, even after an error, so the network can stop.
	d.pace(ctx, time.Until(r.At.Add(2*d.Net.TTL())))
	if rerr := d.Net.Resume(t); err == nil {
		err = rerr
	}
	if err == nil {
		err = d.catchUp(ctx, r, t)
	}
	return d.end(r, err)
}

// holderAndRest waits for the holder and returns it with the other running devices
// in a seeded random order.
func (d *Drill) holderAndRest(ctx context.Context) (*Device, uint64, []*Device, error) {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	rest := d.others(h)
	d.Rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return h, ep, rest, nil
}

func (d *Drill) partitioner() (Partitioner, error) {
	if p, ok := d.Net.(Partitioner); ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w: partitions need an in-process network", ErrProcsUnavailable)
}

func faultPartition(ctx context.Context, d *Drill, _ bool) error {
	p, err := d.partitioner()
	if err != nil {
		return err
	}
	h, ep, rest, err := d.holderAndRest(ctx)
	if err != nil {
		return err
	}
	// The holder's side stays a minority: with n running devices it gets (n-1)/2 - 1
	// companions at most, so the other side keeps a quorum.
	minority := []*Device{h}
	for maxMinority := len(rest) / 2; len(minority) < maxMinority && len(rest) > 0; {
		minority, rest = append(minority, rest[0]), rest[1:]
	}
	r := d.begin(FaultPartition, h, true, ep)
	p.Partition(minority, rest)
	err = d.takeover(ctx, r, minority...)
	p.Heal()
	for _, m := range minority {
		if err == nil {
			err = d.catchUp(ctx, r, m)
		}
	}
	return d.end(r, err)
}

// faultPartial cuts the holder from one standby only: both still reach the others,
// so the holder keeps a quorum; whether the lease moves is up to Raft and the lease.
func faultPartial(ctx context.Context, d *Drill, _ bool) error {
	p, err := d.partitioner()
	if err != nil {
		return err
	}
	h, ep, rest, err := d.holderAndRest(ctx)
	if err != nil || len(rest) < 2 {
		return err
	}
	x := rest[0]
	r := d.begin(FaultPartial, h, true, ep)
	p.Cut([2]*Device{h, x})
	d.pace(ctx, 3*d.Net.TTL()/2)
	p.Heal()
	// The lease may have moved (a Raft election across the cut); either way some
	// device must hold it and sign again.
	err = d.holdsAndSigns(ctx, r)
	if err == nil {
		err = d.catchUp(ctx, r, x)
	}
	return d.end(r, err)
}

func faultSkew(ctx context.Context, d *Drill, _ bool) error {
	cc, ok := d.Net.(ClockControl)
	if !ok {
		return fmt.Errorf("%w: clock skew needs an in-process network", ErrProcsUnavailable)
	}
	h, ep, rest, err := d.holderAndRest(ctx)
	if err != nil || len(rest) == 0 {
		return err
	}
	ttl := d.Net.TTL()
	skewed := rest[0]
	off := 3 * ttl / 2
	if d.Rand.Intn(2) == 0 {
		off = -off
	}
	cc.Skew(skewed, off)
	var drifting *Device
	if len(rest) > 1 {
		drifting = rest[1]
		cc.Drift(drifting, 1.1)
	}
	// Let the standbys observe the skewed lease for a while (renewals continue).
	d.pace(ctx, ttl)
	defer func() { // restored after the round, whatever happened
		cc.Skew(skewed, 0)
		if drifting != nil {
			cc.Drift(drifting, 1)
		}
	}()
	if h, ep, err = d.holder(ctx); err != nil {
		return err
	}
	r := d.begin(FaultSkew, h, true, ep)
	return d.back(ctx, r, h, true, d.Net.Kill(h))
}

// faultRestart stops a device gracefully and starts it again.
func faultRestart(ctx context.Context, d *Drill, onHolder bool) error {
	t, ep, isHolder, err := d.pick(ctx, onHolder, nil)
	if err != nil {
		return err
	}
	return d.restartOne(ctx, t, ep, isHolder)
}

func (d *Drill) restartOne(ctx context.Context, t *Device, ep uint64, isHolder bool) error {
	r := d.begin(FaultRestart, t, isHolder, ep)
	sctx, cancel := context.WithTimeout(ctx, 2*d.Net.TTL()+10*time.Second)
	err := d.Net.Stop(sctx, t)
	cancel()
	return d.back(ctx, r, t, isHolder, err)
}

func stepRollingRestart(ctx context.Context, d *Drill, _ int) error {
	h, _, err := d.holder(ctx)
	if err != nil {
		return err
	}
	for _, x := range append(d.others(h), h) { // the holder last
		hh, ep, err := d.holder(ctx)
		if err != nil {
			return err
		}
		if err := d.restartOne(ctx, x, ep, hh == x); err != nil {
			return err
		}
	}
	return nil
}

func faultRelease(ctx context.Context, d *Drill, _ bool) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	r := d.begin(FaultRelease, h, true, ep)
	err = d.Net.Release(ctx, h)
	if err == nil {
		err = d.takeover(ctx, r)
	}
	return d.end(r, err)
}

func faultTransfer(ctx context.Context, d *Drill, _ bool) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	others := d.others(h)
	if len(others) == 0 {
		return nil
	}
	to := others[d.Rand.Intn(len(others))]
	r := d.begin(FaultTransfer, h, true, ep)
	err = d.Net.Transfer(ctx, h, to)
	if err == nil {
		err = d.takeover(ctx, r)
	}
	if err == nil && r.NewHolder != to.Label() {
		err = fmt.Errorf("transfer to %s: %s holds epoch %d instead", to.Label(), r.NewHolder, r.ToEpoch)
	}
	return d.end(r, err)
}

// faultChurn makes a device leave, then rejoins its slot (wiped state, same keys).
func faultChurn(ctx context.Context, d *Drill, onHolder bool) error {
	// A process made with init --new-chain would bootstrap anew once wiped.
	t, ep, isHolder, err := d.pick(ctx, onHolder, func(x *Device) bool { return d.Net.Kind() != KindProcs || x.Index != 0 })
	if err != nil {
		return err
	}
	if isHolder && d.Net.Kind() == KindProcs && t.Index == 0 {
		return nil // nobody else to churn
	}
	r := d.begin(FaultChurn, t, isHolder, ep)
	lctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	err = d.Net.Leave(lctx, t)
	cancel()
	if err == nil && isHolder {
		err = d.takeover(ctx, r, t)
	}
	if err == nil {
		if !d.compact {
			d.Logf("%s left; %d members remain", t.Label(), len(d.others()))
		}
		jctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
		err = d.Net.Rejoin(jctx, t)
		cancel()
	}
	if err == nil {
		err = d.catchUp(ctx, r, t)
	}
	return d.end(r, err)
}

// stepLoad runs one load generator per device at the drill's rate for 3 s: no
// faults, only concurrent submissions from every device at once.
func stepLoad(ctx context.Context, d *Drill, round int) error {
	var loads []*Load
	for _, x := range d.Net.Devices() {
		l, err := StartLoad(ctx, LoadConfig{Targets: d.Net.DeviceTarget(x), Rate: d.cfg.LoadRate, Max: 1 << 30, Workers: 8,
			Timeout: 2*d.Net.TTL() + 3*time.Second, Prefix: fmt.Sprintf("load-r%d-%s", round, x.Name), Format: FormatOf(d.Net.Chain())})
		if err != nil {
			return err
		}
		loads = append(loads, l)
	}
	d.pace(ctx, 3*time.Second)
	for _, l := range loads {
		l.Stop()
		d.extra = append(d.extra, l)
	}
	c := Counts{}
	for _, l := range loads {
		k := l.Counts()
		c.Submitted, c.Acked, c.Failed = c.Submitted+k.Submitted, c.Acked+k.Acked, c.Failed+k.Failed
	}
	d.Logf("round %d: every device submitted: %d submitted, %d acknowledged, %d failed", round+1, c.Submitted, c.Acked, c.Failed)
	return ctx.Err()
}
