package testnet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"sort"
	"strings"
	"time"
)

// Scenario is one drill: a fault pattern repeated for a number of rounds while load
// runs. Step runs one round on a started cluster whose lease is held.
type Scenario struct {
	Name        string
	Description string
	Step        func(ctx context.Context, d *Drill, round int) error
}

// Scenarios lists the drills `baton drill --scenario NAME` knows, in `all` order.
var Scenarios = []Scenario{
	{"kill-holder", "kill -9 the lease holder (no release), wait for a standby to take over and sign, restart it from its data dir and let it catch up", stepKillHolder},
	{"pause-holder", "freeze the holder (network cut both ways, proposals parked mid-flight, clock stopped) for 2×TTL, wait for a takeover, resume it: its stale proposals must be fenced off", stepPauseHolder},
	{"partition-holder", "cut the holder off in a minority partition, wait for the majority to elect a new holder and sign, heal", stepPartitionHolder},
	{"skew", "skew one standby's wall clock by ±1.5×TTL and make another drift 10% fast, then kill the holder: takeover within 2×TTL, no fork; clocks restored", stepSkew},
	{"rolling-restart", "stop (graceful, releasing) and restart every device in turn, the holder last", stepRollingRestart},
	{"release-handover", "the holder releases the lease (a standby claims at once), then the new holder transfers it to a named device", stepReleaseHandover},
	{"churn", "a new device joins during load and catches up, then a standby leaves the cluster (Raft membership change)", stepChurn},
}

// ScenarioNames returns the names of Scenarios.
func ScenarioNames() []string {
	var out []string
	for _, s := range Scenarios {
		out = append(out, s.Name)
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

// DrillConfig configures one scenario run.
type DrillConfig struct {
	Scenario string
	Nodes    int
	TTL      time.Duration
	Tick     time.Duration
	Rounds   int
	Seed     int64
	// Dir holds the devices' data dirs (default: a temp dir, removed afterwards).
	Dir string
	// LoadRate is intents per second during the drill (default 40).
	LoadRate int
	// Progress receives one line per fault and event (nil: none).
	Progress io.Writer
	Logger   *slog.Logger
}

// Drill is a scenario run in progress: the cluster, the load, a seeded rand.
type Drill struct {
	Cluster *Cluster
	Rand    *rand.Rand
	Load    *Load
	cfg     DrillConfig
	start   time.Time
}

// Logf prints a progress line with the time since the drill started.
func (d *Drill) Logf(format string, args ...any) {
	if d.cfg.Progress == nil {
		return
	}
	fmt.Fprintf(d.cfg.Progress, "  %7.3fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// wait bounds: a takeover needs TTL + tick + a Raft election (2×TTL with skew); a
// loaded 2-core machine gets generous slack.
func (d *Drill) takeoverTimeout() time.Duration { return 4*d.Cluster.TTL() + 10*time.Second }

// holder waits for the current holder.
func (d *Drill) holder(ctx context.Context) (*Device, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	return d.Cluster.WaitHolder(ctx, 0)
}

// takeover waits for a holder above epoch (not one of exclude) and for the chain to
// grow past seq under it; it reports how long it took since from.
func (d *Drill) takeover(ctx context.Context, from time.Time, epoch uint64, exclude ...*Device) (*Device, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	h, ep, err := d.Cluster.WaitHolder(ctx, epoch, exclude...)
	if err != nil {
		return nil, 0, err
	}
	d.Logf("%s holds epoch %d (%.0f ms after the fault)", h.Name, ep, float64(time.Since(from).Microseconds())/1000)
	if err := d.progress(ctx, h, ep); err != nil {
		return h, ep, err
	}
	return h, ep, nil
}

// progress waits until a commit signed at epoch ep is applied on h (the chain grows
// under the new holder; the load keeps intents pending).
func (d *Drill) progress(ctx context.Context, h *Device, ep uint64) error {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		if n := h.Node(); n != nil {
			if st := n.State(); st.Head.Epoch >= ep {
				d.Logf("chain at seq %d, signed by %s in epoch %d", st.Head.Seq, h.Name, st.Head.Epoch)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for a commit in epoch %d on %s: %w", ep, h.Name, ErrTimeout)
		case <-tk.C:
		}
	}
}

// catchUp waits until device x has applied at least the highest head any running
// device had when called.
func (d *Drill) catchUp(ctx context.Context, x *Device) error {
	var target uint64
	for _, o := range d.Cluster.Devices() {
		if n := o.Node(); n != nil && !o.Paused() {
			if s := n.State().Head.Seq; s > target {
				target = s
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		if n := x.Node(); n != nil {
			if s := n.State().Head.Seq; s >= target {
				d.Logf("%s caught up (seq %d)", x.Name, s)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to catch up to seq %d: %w", x.Name, target, ErrTimeout)
		case <-tk.C:
		}
	}
}

func (d *Drill) others(x ...*Device) []*Device {
	var out []*Device
	for _, o := range d.Cluster.Devices() {
		if o.Running() && !contains(x, o) {
			out = append(out, o)
		}
	}
	return out
}

func stepKillHolder(ctx context.Context, d *Drill, _ int) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	at := time.Now()
	if err := d.Cluster.Kill(h); err != nil {
		return err
	}
	if _, _, err := d.takeover(ctx, at, ep, h); err != nil {
		return err
	}
	if err := d.Cluster.Restart(ctx, h); err != nil {
		return err
	}
	return d.catchUp(ctx, h)
}

func stepPauseHolder(ctx context.Context, d *Drill, _ int) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	at := time.Now()
	if err := d.Cluster.Pause(h); err != nil {
		return err
	}
	_, _, err = d.takeover(ctx, at, ep, h)
	// Stay frozen for at least 2×TTL in all, then resume (even after an error, so the
	// cluster can stop).
	select {
	case <-time.After(time.Until(at.Add(2 * d.Cluster.TTL()))):
	case <-ctx.Done():
	}
	d.Cluster.Resume(h)
	if err != nil {
		return err
	}
	return d.catchUp(ctx, h)
}

func stepPartitionHolder(ctx context.Context, d *Drill, _ int) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	rest := d.others(h)
	d.Rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	// The holder's side stays a minority: with n running devices it gets (n-1)/2 - 1
	// companions at most, so the other side keeps a quorum.
	minority := []*Device{h}
	for maxMinority := len(rest) / 2; len(minority) < maxMinority && len(rest) > 0; {
		minority, rest = append(minority, rest[0]), rest[1:]
	}
	at := time.Now()
	d.Cluster.Partition(minority, rest)
	_, _, err = d.takeover(ctx, at, ep, minority...)
	d.Cluster.Heal()
	if err != nil {
		return err
	}
	for _, m := range minority {
		if err := d.catchUp(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func stepSkew(ctx context.Context, d *Drill, _ int) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	rest := d.others(h)
	d.Rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	ttl := d.Cluster.TTL()
	skewed := rest[0]
	off := 3 * ttl / 2
	if d.Rand.Intn(2) == 0 {
		off = -off
	}
	d.Cluster.Skew(skewed, off)
	var drifting *Device
	if len(rest) > 1 {
		drifting = rest[1]
		d.Cluster.Drift(drifting, 1.1)
	}
	restore := func() {
		d.Cluster.Skew(skewed, 0)
		if drifting != nil {
			d.Cluster.Drift(drifting, 1)
		}
	}
	// Let the standbys observe the skewed lease for a while (renewals continue).
	select {
	case <-time.After(ttl):
	case <-ctx.Done():
		restore()
		return ctx.Err()
	}
	at := time.Now()
	if err := d.Cluster.Kill(h); err != nil {
		restore()
		return err
	}
	_, _, err = d.takeover(ctx, at, ep, h)
	if err == nil {
		err = d.Cluster.Restart(ctx, h)
	}
	if err == nil {
		err = d.catchUp(ctx, h)
	}
	restore()
	return err
}

func stepRollingRestart(ctx context.Context, d *Drill, _ int) error {
	h, _, err := d.holder(ctx)
	if err != nil {
		return err
	}
	order := append(d.others(h), h) // the holder last
	for _, x := range order {
		_, ep, err := d.holder(ctx)
		if err != nil {
			return err
		}
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		at := time.Now()
		err = d.Cluster.StopDevice(stopCtx, x)
		cancel()
		if err != nil {
			return err
		}
		if x == h {
			if _, _, err := d.takeover(ctx, at, ep, x); err != nil {
				return err
			}
		}
		if err := d.Cluster.Restart(ctx, x); err != nil {
			return err
		}
		if err := d.catchUp(ctx, x); err != nil {
			return err
		}
	}
	return nil
}

func stepReleaseHandover(ctx context.Context, d *Drill, _ int) error {
	h, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	at := time.Now()
	if err := d.Cluster.Release(ctx, h); err != nil {
		return err
	}
	h2, ep2, err := d.takeover(ctx, at, ep)
	if err != nil {
		return err
	}
	others := d.others(h2)
	if len(others) == 0 {
		return nil
	}
	to := others[d.Rand.Intn(len(others))]
	at = time.Now()
	if err := d.Cluster.Transfer(ctx, h2, to); err != nil {
		return err
	}
	ctx2, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	got, ep3, err := d.Cluster.WaitHolder(ctx2, ep2)
	if err != nil {
		return err
	}
	d.Logf("%s holds epoch %d (%.0f ms after the transfer)", got.Name, ep3, float64(time.Since(at).Microseconds())/1000)
	if got != to {
		return fmt.Errorf("transfer to %s: %s holds epoch %d instead", to.Name, got.Name, ep3)
	}
	return d.progress(ctx, got, ep3)
}

func stepChurn(ctx context.Context, d *Drill, _ int) error {
	if len(d.Cluster.Devices()) >= MaxNodes {
		return fmt.Errorf("churn: already %d devices", MaxNodes)
	}
	jctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	x, err := d.Cluster.AddDevice(jctx)
	cancel()
	if err != nil {
		return err
	}
	if err := d.catchUp(ctx, x); err != nil {
		return err
	}
	h, _, err := d.holder(ctx)
	if err != nil {
		return err
	}
	standbys := d.others(h, x)
	if len(standbys) == 0 {
		return nil
	}
	leaver := standbys[d.Rand.Intn(len(standbys))]
	lctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	if err := d.Cluster.RemoveDevice(lctx, leaver); err != nil {
		return err
	}
	_, ep, err := d.holder(ctx)
	if err != nil {
		return err
	}
	d.Logf("%s left; %d members remain", leaver.Name, len(d.others()))
	h2, _, _ := d.Cluster.Holder()
	if h2 == nil {
		return nil
	}
	return d.progress(ctx, h2, ep)
}

// RunScenario runs one scenario on a fresh in-process cluster and returns its
// Report. The error is set only when the drill could not run at all (bad config);
// a drill that fails midway returns a Report with Error set and OK false.
func RunScenario(ctx context.Context, cfg DrillConfig) (Report, error) {
	sc, err := LookupScenario(cfg.Scenario)
	if err != nil {
		return Report{}, err
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.LoadRate <= 0 {
		cfg.LoadRate = 40
	}
	d := &Drill{Rand: rand.New(rand.NewSource(cfg.Seed)), cfg: cfg, start: time.Now()}
	c, err := NewCluster(Config{Nodes: cfg.Nodes, TTL: cfg.TTL, Tick: cfg.Tick, Dir: cfg.Dir, Logger: cfg.Logger,
		OnEvent: func(e Event) {
			d.Logf("%-9s %s", e.Kind, e.Label)
		}})
	if err != nil {
		return Report{}, err
	}
	d.Cluster = c
	rep := Report{Scenario: sc.Name, Seed: cfg.Seed, Started: d.start,
		Params: Params{Nodes: c.cfg.Nodes, TTL: c.cfg.TTL, Tick: c.cfg.Tick, Rounds: cfg.Rounds}}
	defer c.Close()
	fail := func(err error) {
		if rep.Error == "" && err != nil {
			rep.Error = err.Error()
			d.Logf("ERROR %v", err)
		}
	}
	d.Logf("scenario %s: %s", sc.Name, sc.Description)
	if err := c.Start(ctx); err != nil {
		fail(err)
	} else if h, ep, err := d.holder(ctx); err != nil {
		fail(err)
	} else {
		d.Logf("cluster of %d up; %s holds epoch %d", c.cfg.Nodes, h.Name, ep)
		d.Load, err = StartLoad(ctx, LoadConfig{Targets: c.LoadTargets(), Rate: cfg.LoadRate, Max: 1 << 30,
			Timeout: 2*c.TTL() + 3*time.Second, Prefix: sc.Name})
		if err != nil {
			fail(err)
		}
		for r := 0; r < cfg.Rounds && rep.Error == "" && d.Load != nil; r++ {
			d.Logf("round %d/%d", r+1, cfg.Rounds)
			if err := d.settle(ctx); err != nil {
				fail(err)
				break
			}
			fail(sc.Step(ctx, d, r))
		}
		if d.Load != nil {
			// A little more load after the last fault, then drain.
			if rep.Error == "" {
				fail(d.settle(ctx))
			}
			d.Load.Stop()
			rep.Counts = d.Load.Counts()
			d.Logf("load stopped: %d submitted, %d acknowledged, %d failed", rep.Counts.Submitted, rep.Counts.Acked, rep.Counts.Failed)
		}
	}
	// Bring every device that is down (and did not leave) back, so the checker reads
	// every replica; then wait for convergence.
	for _, x := range c.Devices() {
		x.mu.Lock()
		down := x.node == nil && !x.left && x.id != ""
		x.mu.Unlock()
		if x.Paused() {
			c.Resume(x)
		}
		if down {
			fail(c.Restart(ctx, x))
		}
	}
	if c.partitioned() {
		c.Heal()
	}
	cctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout()+10*time.Second)
	if err := c.WaitConverged(cctx, 1); err != nil {
		fail(err)
	} else {
		d.Logf("converged")
	}
	cancel()
	var acks []Ack
	if d.Load != nil {
		acks = d.Load.Acks()
	}
	res, err := c.Check(acks)
	fail(err)
	rep.Check = res
	rep.Rejections = c.Rejections()
	rep.Finished = time.Now()
	c.Timeline(&rep)
	attributeFailovers(&rep)
	if err := c.Stop(ctx); err != nil {
		d.Logf("stop: %v", err)
	}
	d.Logf("stopped")
	rep.Finish()
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	var durs []string
	for _, f := range rep.Check.Failovers {
		durs = append(durs, failoverText(f))
	}
	d.Logf("%s %s: %d commits, %d intents, %d acked, forks %d, lost %d, duplicates %d, invalid %d, failovers [%s]",
		verdict, sc.Name, rep.Check.Commits, rep.Check.Intents, rep.Check.Acked, rep.Check.Forks, rep.Check.Lost,
		rep.Check.Dupes, rep.Check.Invalid, strings.Join(durs, ", "))
	if len(rep.Rejections) > 0 {
		d.Logf("fenced by the apply: %s", fmtRejections(rep.Rejections))
	}
	for _, f := range rep.Check.Findings {
		d.Logf("  finding: %s", f)
	}
	sort.SliceStable(rep.Events, func(i, j int) bool { return rep.Events[i].At.Before(rep.Events[j].At) })
	return rep, nil
}

// settle lets the load run until the chain has grown by a few commits (bounded).
func (d *Drill) settle(ctx context.Context) error {
	var base uint64
	for _, n := range d.Cluster.Nodes() {
		if s := n.State().Head.Seq; s > base {
			base = s
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		for _, n := range d.Cluster.Nodes() {
			if n.State().Head.Seq >= base+5 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chain stuck at seq %d under load: %w", base, ErrTimeout)
		case <-tk.C:
		}
	}
}

// faultKinds are the events a failover is attributed to: faults, and the recoveries
// that can disturb a live holder too (a restarted device's Raft election, a resumed
// device's stale proposals).
var faultKinds = map[string]bool{EventKill: true, EventPause: true, EventPartition: true, EventStop: true,
	EventRelease: true, EventLeave: true, EventRestart: true, EventResume: true, EventHeal: true, EventJoin: true}

// attributeFailovers names, for each failover, the last fault before the new
// holder's first commit and the time since it.
func attributeFailovers(r *Report) {
	for i := range r.Check.Failovers {
		f := &r.Check.Failovers[i]
		if f.Source != "observed" {
			continue
		}
		for _, e := range r.Events {
			if faultKinds[e.Kind] && !e.At.After(f.FirstAt) && f.FirstAt.Sub(e.At) < 60*time.Second {
				f.Fault, f.SinceFault = e.Label, f.FirstAt.Sub(e.At)
			}
		}
	}
}

func failoverText(f Failover) string {
	s := fmt.Sprintf("e%d→e%d %s", f.FromEpoch, f.ToEpoch, fmtDur(f.Duration))
	if f.Fault != "" {
		s += fmt.Sprintf(" (%s after %s)", fmtDur(f.SinceFault), f.Fault)
	}
	return s
}

func fmtRejections(m map[string]uint64) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
