package testnet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/wait"
)

// Drill bounds.
const (
	// MaxRounds bounds any drill, a soak included, whatever its duration.
	MaxRounds = 1_000_000
	// compactAfter: drills with more rounds than this (and soaks) print a status
	// line every statusEvery instead of a line per event.
	compactAfter = 20
	statusEvery  = 5 * time.Second
)

// DrillConfig configures one scenario run.
type DrillConfig struct {
	Scenario string
	Nodes    int
	TTL      time.Duration
	Tick     time.Duration
	// Rounds is how many times the scenario's fault is repeated (default 1); with
	// Duration, the soak runs until Duration is up instead (bounded by MaxRounds).
	Rounds   int
	Duration time.Duration
	Seed     int64
	// Dir holds the devices' data dirs (default: a temp dir, removed afterwards).
	Dir string
	// LoadRate is intents per second during the drill (default 40).
	LoadRate int
	// Procs runs each device as a real `baton run` process of Bin (default: this
	// executable).
	Procs bool
	Bin   string
	// Progress receives progress lines (nil: none): one per fault and event in a
	// small drill, a status line every few seconds in a long one.
	Progress io.Writer
	Logger   *slog.Logger
	// Strict makes the findings listed in KnownIssues fail the drill too.
	Strict bool
	// Format is the chain's commit format: "" or "baton", or "atproto" (a P-256
	// chain key, DAG-CBOR records).
	Format string
	// Inspect, optional, is handed what the checker reads (every device's chain)
	// after the run; its error fails the drill. Tests give it another checker (an
	// atproto chain to indigo: testnet is linked into the binary, indigo's API is not).
	Inspect func(CheckInput) error
}

// Drill is a scenario run in progress: the network, the load, a seeded rand and the
// rounds so far.
type Drill struct {
	Net  Net
	Rand *rand.Rand
	Load *Load

	cfg     DrillConfig
	start   time.Time
	compact bool
	extra   []*Load // the load scenario's per-device generators

	failedRounds int
	firstFailure string

	mu         sync.Mutex
	rounds     []Round
	lastStatus time.Time
	lastFail   *Round
}

// Logf prints a progress line with the time since the drill started.
func (d *Drill) Logf(format string, args ...any) {
	if d.cfg.Progress == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.cfg.Progress, "  %7.3fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// takeoverTimeout bounds every wait: a takeover needs TTL + tick + a Raft election
// (2×TTL with skew); a loaded 2-core machine gets generous slack.
func (d *Drill) takeoverTimeout() time.Duration { return 4*d.Net.TTL() + 10*time.Second }

// pace waits dur (or until ctx ends): a fault's length, never a synchronisation.
func (d *Drill) pace(ctx context.Context, dur time.Duration) {
	if dur <= 0 {
		return
	}
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// holder waits for the current holder.
func (d *Drill) holder(ctx context.Context) (*Device, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	return d.Net.WaitHolder(ctx, 0)
}

// others are the running devices but x.
func (d *Drill) others(x ...*Device) []*Device {
	var out []*Device
	for _, o := range d.Net.Devices() {
		if o.Running() && !o.Left() && !contains(x, o) {
			out = append(out, o)
		}
	}
	return out
}

// begin opens a round: the fault of kind is about to hit t (the holder or not, the
// lease at epoch ep).
func (d *Drill) begin(kind string, t *Device, isHolder bool, ep uint64) *Round {
	d.mu.Lock()
	n := len(d.rounds) + 1
	d.mu.Unlock()
	return &Round{N: n, Kind: kind, Device: t.Label(), Holder: isHolder, At: time.Now(), FromEpoch: ep}
}

// end closes a round: it is recorded with its outcome and the Raft logs the network
// can read now are read.
func (d *Drill) end(r *Round, err error) error {
	r.Took = time.Since(r.At)
	if err != nil {
		r.Error = err.Error()
	}
	d.Net.Harvest()
	d.mu.Lock()
	d.rounds = append(d.rounds, *r)
	if r.Failover > 0 {
		last := *r
		d.lastFail = &last
	}
	d.mu.Unlock()
	if r.Over && !d.compact {
		d.Logf("round %d: failover %s is over the bound %s", r.N, fmtDur(r.Failover), fmtDur(d.bound(r.Kind)))
	}
	return err
}

// statusLoop prints the status line every statusEvery until ctx ends (compact
// progress only).
func (d *Drill) statusLoop(ctx context.Context) {
	if !d.compact || d.cfg.Progress == nil {
		return
	}
	tk := time.NewTicker(statusEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			d.status(false)
		}
	}
}

func (d *Drill) bound(kind string) time.Duration {
	return bound(kind, Params{TTL: d.Net.TTL(), Tick: d.Net.Tick(), Election: d.Net.Election()})
}

// status prints the compact progress line (faults so far by kind, the last
// failover, the chain and the load), at most once every statusEvery unless forced.
func (d *Drill) status(force bool) {
	if !d.compact || d.cfg.Progress == nil {
		return
	}
	d.mu.Lock()
	if !force && time.Since(d.lastStatus) < statusEvery-statusEvery/10 { // the ticker's own jitter aside
		d.mu.Unlock()
		return
	}
	d.lastStatus = time.Now()
	byKind := map[string]int{}
	for _, r := range d.rounds {
		byKind[r.Kind]++
	}
	n, last := len(d.rounds), d.lastFail
	d.mu.Unlock()
	line := fmt.Sprintf("faults %d (%s)", n, joinCounts(byKind, "%s %d", ", "))
	if last != nil {
		line += fmt.Sprintf(" · last failover #%d %s e%d→e%d %s", last.N, last.Kind, last.FromEpoch, last.ToEpoch, fmtDur(last.Failover))
	}
	if d.Load != nil {
		c := d.Load.Counts()
		line += fmt.Sprintf(" · seq %d · acked %d, failed %d", d.maxSeq(), c.Acked, c.Failed)
	}
	d.Logf("%s", line)
}

func (d *Drill) maxSeq() uint64 {
	var m uint64
	for _, x := range d.Net.Devices() {
		if st, ok := d.Net.State(x); ok && st.Head.Seq > m {
			m = st.Head.Seq
		}
	}
	return m
}

// takeover waits for a holder above the round's epoch (not one of exclude) and for
// a commit under it, and records the failover: from the fault to the first commit of
// the new epoch applied anywhere (the timeline's observation when it has one).
func (d *Drill) takeover(ctx context.Context, r *Round, exclude ...*Device) error {
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	h, ep, err := d.Net.WaitHolder(ctx, r.FromEpoch, exclude...)
	if err != nil {
		return err
	}
	if !d.compact {
		d.Logf("%s holds epoch %d (%.0f ms after the fault)", h.Label(), ep, float64(time.Since(r.At).Microseconds())/1000)
	}
	return d.signed(ctx, r, h, ep)
}

// holdsAndSigns waits for any holder (the lease may or may not have moved) and a
// commit under it; a moved lease is recorded as the round's failover.
func (d *Drill) holdsAndSigns(ctx context.Context, r *Round) error {
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	h, ep, err := d.Net.WaitHolder(ctx, 0)
	if err != nil {
		return err
	}
	if ep <= r.FromEpoch {
		return nil
	}
	return d.signed(ctx, r, h, ep)
}

// signed waits until h has applied a commit of epoch ep and records the failover.
func (d *Drill) signed(ctx context.Context, r *Round, h *Device, ep uint64) error {
	var seq uint64
	err := wait.Until(ctx, fmt.Sprintf("a commit in epoch %d on %s", ep, h.Label()), func() bool {
		st, ok := d.Net.State(h)
		seq = st.Head.Seq
		return ok && st.Head.Epoch >= ep
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	at := time.Now()
	if t, ok := d.Net.FirstCommit(ep); ok && t.Before(at) {
		at = t
	}
	r.Failover, r.ToEpoch, r.NewHolder = max(at.Sub(r.At), time.Microsecond), ep, h.Label()
	r.Over = r.Failover > d.bound(r.Kind)
	if !d.compact {
		d.Logf("chain at seq %d, signed by %s in epoch %d", seq, h.Label(), ep)
	}
	return nil
}

// catchUpTimeout bounds a device's catch-up after it came back. Not a promise of the
// design: a restarted device replays its Raft log and a rejoined one receives the
// whole log (or a snapshot), so the time grows with the log until a snapshot
// compacts it.
const catchUpTimeout = 60 * time.Second

// catchUp waits until device x has applied at least the highest head any running
// device had when called, and records in r how long that took.
func (d *Drill) catchUp(ctx context.Context, r *Round, x *Device) error {
	target := d.maxSeq()
	start := time.Now()
	defer func() { r.CatchUp = max(r.CatchUp, time.Since(start)) }()
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	var seq uint64
	var exited error
	err := wait.Until(ctx, fmt.Sprintf("%s to catch up to seq %d", x.Label(), target), func() bool {
		if exited = netExited(d.Net, x); exited != nil {
			return true // no wait for a process that is gone
		}
		st, ok := d.Net.State(x)
		seq = st.Head.Seq
		return ok && seq >= target
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	if exited != nil {
		return exited
	}
	if !d.compact {
		d.Logf("%s caught up (seq %d)", x.Label(), seq)
	}
	return nil
}

// netExited is n's Exited for a Net of processes (ProcCluster), nil otherwise.
func netExited(n Net, x *Device) error {
	if e, ok := n.(interface{ Exited(*Device) error }); ok {
		return e.Exited(x)
	}
	return nil
}

// settle lets the load run until the chain has grown by a few commits (bounded).
func (d *Drill) settle(ctx context.Context) error {
	base := d.maxSeq()
	ctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
	defer cancel()
	if err := wait.Until(ctx, fmt.Sprintf("the chain to grow past seq %d under load", base+4), func() bool {
		return d.maxSeq() >= base+5
	}); err != nil {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return nil
}

// more reports whether round r (0-based) should run.
func (d *Drill) more(ctx context.Context, r int, loopStart time.Time) bool {
	if ctx.Err() != nil || r >= MaxRounds {
		return false
	}
	if d.cfg.Duration > 0 {
		return time.Since(loopStart) < d.cfg.Duration
	}
	return r < d.cfg.Rounds
}

// newNet builds the drill's network.
func newNet(cfg DrillConfig, onEvent func(Event)) (Net, error) {
	if cfg.Procs {
		return NewProcCluster(ProcsConfig{Bin: cfg.Bin, Nodes: cfg.Nodes, TTL: cfg.TTL, Tick: cfg.Tick, Dir: cfg.Dir, OnEvent: onEvent, Format: cfg.Format})
	}
	return NewCluster(Config{Nodes: cfg.Nodes, TTL: cfg.TTL, Tick: cfg.Tick, Dir: cfg.Dir, Logger: cfg.Logger, OnEvent: onEvent,
		Format: cfg.Format})
}

// RunScenario runs one scenario on a fresh network (in-process, or processes with
// cfg.Procs) and returns its Report. The error is set only when the drill could not
// run at all (bad config, no binary); a drill that fails midway returns a Report
// with Error set and OK false.
func RunScenario(ctx context.Context, cfg DrillConfig) (Report, error) {
	sc, err := LookupScenario(cfg.Scenario)
	if err != nil {
		return Report{}, err
	}
	if cfg.Procs && !sc.Procs {
		return Report{}, fmt.Errorf("%w: scenario %q needs in-process hooks (procs mode runs: %s)", ErrProcsUnavailable, cfg.Scenario,
			strings.Join(AllScenarios(true), ", "))
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.LoadRate <= 0 {
		cfg.LoadRate = 40
	}
	d := &Drill{Rand: rand.New(rand.NewSource(cfg.Seed)), cfg: cfg, start: time.Now(),
		compact: cfg.Duration > 0 || cfg.Rounds > compactAfter}
	net, err := newNet(cfg, func(e Event) {
		if !d.compact {
			d.Logf("%-9s %s", e.Kind, e.Label)
		}
	})
	if err != nil {
		return Report{}, err
	}
	d.Net = net
	defer net.Close()
	nodes := len(net.Devices())
	rep := Report{Scenario: sc.Name, Seed: cfg.Seed, Started: d.start,
		Params: Params{Nodes: nodes, TTL: net.TTL(), Tick: net.Tick(), Election: net.Election(), Rounds: cfg.Rounds,
			Duration: cfg.Duration, Procs: cfg.Procs, FaultFree: sc.FaultFree, Format: cfg.Format}}
	fail := func(err error) {
		if rep.Error == "" && err != nil {
			rep.Error = err.Error()
			d.Logf("ERROR %v", err)
		}
	}
	d.Logf("scenario %s (%s): %s", sc.Name, net.Kind(), sc.Description)
	if err := net.Start(ctx); err != nil {
		fail(err)
	} else if h, ep, err := d.holder(ctx); err != nil {
		fail(err)
	} else {
		d.Logf("cluster of %d up; %s holds epoch %d", nodes, h.Label(), ep)
		d.Load, err = StartLoad(ctx, LoadConfig{Targets: net.LoadTargets(), Rate: cfg.LoadRate, Max: 1 << 30,
			Timeout: 2*net.TTL() + 3*time.Second, Prefix: sc.Name, Format: FormatOf(net.Chain())})
		fail(err)
		sctx, stopStatus := context.WithCancel(ctx)
		statusDone := make(chan struct{})
		go func() { defer close(statusDone); d.statusLoop(sctx) }()
		loopStart := time.Now()
		for r := 0; rep.Error == "" && d.Load != nil && d.more(ctx, r, loopStart); r++ {
			if !d.compact {
				if cfg.Duration > 0 {
					d.Logf("round %d", r+1)
				} else {
					d.Logf("round %d/%d", r+1, cfg.Rounds)
				}
			}
			if err := d.settle(ctx); err != nil {
				fail(err)
				break
			}
			err := sc.Step(ctx, d, r)
			if err != nil && cfg.Duration > 0 && ctx.Err() == nil {
				// A soak records a failed round and goes on, so that one run shows
				// every kind of trouble; the report fails at the end.
				if err = d.roundFailed(ctx, err); err == nil {
					continue
				}
			}
			fail(err)
		}
		if d.failedRounds > 0 {
			fail(fmt.Errorf("%d round(s) failed; the first: %s", d.failedRounds, d.firstFailure))
		}
		if d.Load != nil {
			// A little more load after the last fault, then drain.
			if rep.Error == "" {
				fail(d.settle(ctx))
			}
			d.Load.Stop()
		}
		stopStatus()
		<-statusDone
		d.status(true)
	}
	d.recover(ctx, fail)
	cctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout()+10*time.Second)
	if err := net.WaitConverged(cctx, 1); err != nil {
		fail(err)
	} else {
		d.Logf("converged")
	}
	cancel()
	// The run ends here: Collect stops the devices to read them (the holder's hold
	// ends then) and the checker takes its time; a window running on to then showed
	// every hold bar stopping short of the end.
	rep.Finished = time.Now()
	in, err := net.Collect(ctx)
	fail(err)
	for _, l := range append([]*Load{d.Load}, d.extra...) {
		if l == nil {
			continue
		}
		in.Acked = append(in.Acked, l.Acks()...)
		c := l.Counts()
		rep.Counts.Submitted += c.Submitted
		rep.Counts.Acked += c.Acked
		rep.Counts.Failed += c.Failed
		rep.Counts.Retried += c.Retried
		rep.Counts.Cancelled += c.Cancelled
		for k, v := range c.Errors {
			if rep.Counts.Errors == nil {
				rep.Counts.Errors = map[string]int{}
			}
			rep.Counts.Errors[k] += v
		}
	}
	in.FaultFree, in.Strict = sc.FaultFree, cfg.Strict
	rep.Check = Check(in)
	if cfg.Inspect != nil {
		if err := cfg.Inspect(in); err != nil {
			fail(fmt.Errorf("inspect: %w", err))
		}
	}
	rep.Rejections = in.Rejections
	net.Timeline(&rep)
	rep.Rounds = d.rounds
	attributeRefused(&rep)
	rep.Load = loadSeries(append([]*Load{d.Load}, d.extra...), rep.Started, rep.Finished)
	sort.SliceStable(rep.Events, func(i, j int) bool { return rep.Events[i].At.Before(rep.Events[j].At) })
	attributeFailovers(&rep)
	rep.Finish()
	d.logVerdict(&rep)
	if !rep.OK {
		if pc, ok := net.(*ProcCluster); ok {
			if logs := pc.TailLogs(8); logs != "" {
				d.Logf("process logs (tail):\n%s", logs)
			}
		}
	}
	return rep, nil
}

// maxFailedRounds ends a soak whose rounds keep failing.
const maxFailedRounds = 25

// roundFailed handles a soak round that failed with err: it is counted, the network
// is brought back (every device up, a holder signing) and the soak goes on; nil
// unless it cannot (too many failures, no holder afterwards).
func (d *Drill) roundFailed(ctx context.Context, err error) error {
	d.failedRounds++
	d.mu.Lock()
	n := len(d.rounds)
	d.mu.Unlock()
	if d.firstFailure == "" {
		d.firstFailure = fmt.Sprintf("round %d: %v", n, err)
	}
	d.Logf("ERROR round %d (the soak goes on): %v", n, err)
	if d.failedRounds >= maxFailedRounds {
		return fmt.Errorf("%d rounds failed, the soak stops: %w", d.failedRounds, err)
	}
	d.recover(ctx, func(err error) {
		if err != nil {
			d.Logf("recovering after round %d: %v", n, err)
		}
	})
	if _, _, herr := d.holder(ctx); herr != nil {
		return fmt.Errorf("no holder after round %d failed (%v): %w", n, err, herr)
	}
	return nil
}

// recover brings every device back (resumed, restarted, rejoined, the partition
// healed) so that the checker reads every replica.
func (d *Drill) recover(ctx context.Context, fail func(error)) {
	if c, ok := d.Net.(*Cluster); ok && c.partitioned() {
		c.Heal()
	}
	for _, x := range d.Net.Devices() {
		switch {
		case x.Paused():
			fail(d.Net.Resume(x))
		case x.Left():
			jctx, cancel := context.WithTimeout(ctx, d.takeoverTimeout())
			fail(d.Net.Rejoin(jctx, x))
			cancel()
		case x.wasStarted() && !x.Running():
			fail(d.Net.Restart(ctx, x))
		}
	}
}

func (d *Drill) logVerdict(rep *Report) {
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	c := rep.Check
	failed := ""
	if len(rep.Counts.Errors) > 0 {
		failed = " (" + joinCounts(rep.Counts.Errors, "%s %d", ", ") + ")"
	}
	if rep.Counts.Cancelled > 0 {
		failed += fmt.Sprintf(", %d waiting when the load stopped (outcome unknown)", rep.Counts.Cancelled)
	}
	d.Logf("load: %d submitted, %d acknowledged, %d failed%s", rep.Counts.Submitted, rep.Counts.Acked, rep.Counts.Failed, failed)
	d.Logf("%s %s: %d commits, %d intents, %d acked, forks %d, lost %d, duplicates %d, invalid %d, failovers [%s]",
		verdict, rep.Scenario, c.Commits, c.Intents, c.Acked, c.Forks, c.Lost, c.Dupes, c.Invalid, failoversText(rep, 4))
	if c.RaftRead {
		late := ""
		if c.Late > 0 {
			late = fmt.Sprintf(", signed after the chains were read %d", c.Late)
		}
		d.Logf("raft logs: %d signed commits (%d commit entries), equivocations %d, signed-but-refused %d%s%s, unverified %d, unread entries %d",
			c.Signed, c.RaftEntries, c.Equivocations, c.Refused, refusedByText(c.RefusedBy), late, c.Unverified, c.RaftUnread)
	}
	if len(rep.Rejections) > 0 {
		d.Logf("fenced by the apply: %s", fmtRejections(rep.Rejections))
	}
	// The findings that fail the drill first, then the known ones, a few of each
	// kind (all of them are in report.json).
	shown := map[string]int{}
	for _, known := range []bool{false, true} {
		for _, f := range c.Findings {
			if (f.Known != "") != known {
				continue
			}
			if shown[f.Kind]++; shown[f.Kind] <= 5 {
				d.Logf("  finding: %s", f)
			}
		}
	}
	for _, k := range sortedKeys(shown) {
		if shown[k] > 5 {
			d.Logf("  ... and %d more %s findings (report.json)", shown[k]-5, k)
		}
	}
}

func refusedByText(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return " (" + joinCounts(m, "%s %d", ", ") + ")"
}

// joinCounts formats m's entries with format (key, count), sorted by key, joined
// by sep.
func joinCounts[V int | uint64](m map[string]V, format, sep string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return strings.Join(parts, sep)
}

// failoversText lists the chain's failovers, or summarises them when there are more
// than max.
func failoversText(r *Report, maxListed int) string {
	fs := r.Check.Failovers
	if len(fs) <= maxListed {
		var out []string
		for _, f := range fs {
			out = append(out, failoverText(f))
		}
		return strings.Join(out, "; ")
	}
	var ds []time.Duration
	for _, f := range fs {
		ds = append(ds, f.Duration)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return fmt.Sprintf("%d failovers, median %s, max %s", len(fs), fmtDur(quantile(ds, 0.5)), fmtDur(ds[len(ds)-1]))
}

// attributeRefused counts each signed-but-refused commit against the round during
// which its entry was appended (the check's full list; before the first fault it
// counts for none).
func attributeRefused(r *Report) {
	for _, sc := range r.Check.refusedAll {
		if sc.At.IsZero() {
			continue
		}
		i := sort.Search(len(r.Rounds), func(i int) bool { return r.Rounds[i].At.After(sc.At) }) - 1
		if i >= 0 {
			r.Rounds[i].Refused++
		}
	}
}

// faultKinds are the events a failover is attributed to: faults, and the recoveries
// that can disturb a live holder too (a restarted device's Raft election, a resumed
// device's stale proposals).
var faultKinds = map[string]bool{EventKill: true, EventPause: true, EventPartition: true, EventStop: true,
	EventRelease: true, EventTransfer: true, EventLeave: true, EventRestart: true, EventResume: true, EventHeal: true, EventJoin: true}

// attributeFailovers names, for each failover, the last fault before the new
// holder's first commit and the time since it.
func attributeFailovers(r *Report) {
	var evs []Event
	for _, e := range r.Events {
		if faultKinds[e.Kind] {
			evs = append(evs, e)
		}
	}
	for i := range r.Check.Failovers {
		f := &r.Check.Failovers[i]
		if f.Source != "observed" {
			continue
		}
		j := sort.Search(len(evs), func(j int) bool { return evs[j].At.After(f.FirstAt) }) - 1
		if j >= 0 && f.FirstAt.Sub(evs[j].At) < 60*time.Second {
			f.Fault, f.SinceFault = evs[j].Label, f.FirstAt.Sub(evs[j].At)
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

func fmtRejections(m map[string]uint64) string { return joinCounts(m, "%s=%d", " ") }
