package testnet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
)

// ProcsScenarios are the scenarios multi-process mode supports: the faults a real
// process can suffer from outside (kill -9, SIGSTOP/SIGCONT, SIGTERM and restart)
// plus the API's handover. Partitions, clock skew and churn need in-process hooks.
var ProcsScenarios = []string{"kill-holder", "pause-holder", "rolling-restart", "release-handover"}

// ProcsConfig configures a multi-process drill.
type ProcsConfig struct {
	DrillConfig
	// Bin is the baton binary (default: this executable).
	Bin string
}

// Proc is one device running as a `baton run` process.
type Proc struct {
	Name   string
	Index  int
	Dir    string
	Listen string

	pc      *ProcCluster
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	client  *api.Client
	paused  bool
	started bool
}

// ProcCluster is a cluster of real baton processes on 127.0.0.1, driven through the
// CLI (init, invite, join, run) and each device's API socket (api.Client).
type ProcCluster struct {
	bin   string
	dir   string
	tmp   bool
	ttl   time.Duration
	tick  time.Duration
	chain string
	flags []string
	log   func(Event)

	mu    sync.Mutex
	procs []*Proc
	rec   *recorder
	stop  context.CancelFunc
	done  chan struct{}
}

// NewProcCluster prepares n devices' data dirs under dir (a temp dir if empty).
func NewProcCluster(cfg ProcsConfig, onEvent func(Event)) (*ProcCluster, error) {
	bin := cfg.Bin
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: no --bin and no executable path: %w", ErrProcsUnavailable, err)
		}
		bin = exe
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("%w: baton binary %q not found", ErrProcsUnavailable, bin)
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes || cfg.Tick >= cfg.TTL {
		return nil, fmt.Errorf("%w: nodes %d, tick %s, ttl %s", ErrBadConfig, cfg.Nodes, cfg.Tick, cfg.TTL)
	}
	pc := &ProcCluster{bin: bin, dir: cfg.Dir, ttl: cfg.TTL, tick: cfg.Tick, log: onEvent,
		flags: []string{"--ttl", cfg.TTL.String(), "--tick", cfg.Tick.String(), "--raft-timeout", "300ms", "--log-level", "info"}}
	if pc.dir == "" {
		d, err := os.MkdirTemp("", "baton-procs-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		pc.dir, pc.tmp = d, true
	}
	for i := 0; i < cfg.Nodes; i++ {
		l, err := freeListen()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("d%d", i)
		pc.procs = append(pc.procs, &Proc{Name: name, Index: i, Dir: filepath.Join(pc.dir, name), Listen: l, pc: pc})
	}
	pc.rec = newRecorder(DefaultSampleEvery*2, pc.sample)
	return pc, nil
}

func freeListen() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port), nil
}

// Procs returns the devices.
func (pc *ProcCluster) Procs() []*Proc {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return append([]*Proc(nil), pc.procs...)
}

func (pc *ProcCluster) event(p *Proc, kind, label string) {
	e := Event{At: time.Now(), Kind: kind, Label: label}
	if p != nil {
		e.Device = p.Name
	}
	pc.rec.event(e)
	if pc.log != nil {
		pc.log(e)
	}
}

// runCLI runs the binary to completion (bounded) and returns its stdout.
func (pc *ProcCluster) runCLI(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pc.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("baton %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Start initialises and starts every device: d0 with a new chain (it bootstraps),
// the others from an invite (join).
func (pc *ProcCluster) Start(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.Background())
	pc.stop, pc.done = cancel, make(chan struct{})
	go func() {
		defer close(pc.done)
		pc.rec.run(rctx)
	}()
	ps := pc.Procs()
	out, err := pc.runCLI(ctx, "init", "--data", ps[0].Dir, "--new-chain")
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "did:key:") {
			pc.chain = f
		}
	}
	if pc.chain == "" {
		return fmt.Errorf("baton init printed no chain did: %q", out)
	}
	if err := ps[0].spawn(append([]string{"run", "--data", ps[0].Dir, "--listen", ps[0].Listen}, pc.flags...)); err != nil {
		return err
	}
	if err := pc.poll(ctx, 30*time.Second, "d0 to hold the lease", func() bool {
		st, ok := ps[0].state()
		return ok && st.Lease.HeldByMe
	}); err != nil {
		return err
	}
	for _, p := range ps[1:] {
		invite, err := pc.runCLI(ctx, "invite", "--data", ps[0].Dir, "--with-chain-key", "--ttl", "10m")
		if err != nil {
			return err
		}
		args := append([]string{"join", "--data", p.Dir, "--listen", p.Listen}, pc.flags...)
		if err := p.spawn(append(args, strings.TrimSpace(invite))); err != nil {
			return err
		}
		want := p.Index + 1
		if err := pc.poll(ctx, 30*time.Second, p.Name+" to join", func() bool {
			st, ok := p.state()
			return ok && st.Members == want && st.Raft.Leader != ""
		}); err != nil {
			return err
		}
	}
	return nil
}

func (pc *ProcCluster) poll(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ErrTimeout)
		case <-tk.C:
		}
	}
}

// spawn starts the process with its output appended to <dir>.log.
func (p *Proc) spawn(args []string) error {
	if err := os.MkdirAll(filepath.Dir(p.Dir), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(p.Dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.pc.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited, p.paused, p.started = cmd, exited, false, true
	if p.client == nil {
		c, err := api.NewClient(filepath.Join(p.Dir, api.SocketFile), "")
		if err == nil {
			p.client = c
		}
	}
	p.mu.Unlock()
	return nil
}

// Running reports whether the process is alive (it may be stopped with SIGSTOP).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the process is stopped with SIGSTOP.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// state asks the device's API for its state (bounded: a frozen process does not
// answer).
func (p *Proc) state() (node.State, bool) {
	if !p.Running() || p.Paused() {
		return node.State{}, false
	}
	p.mu.Lock()
	c := p.client
	p.mu.Unlock()
	if c == nil {
		return node.State{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	st, err := c.State(ctx)
	return st, err == nil
}

func (pc *ProcCluster) sample() []sampled {
	var out []sampled
	for _, p := range pc.Procs() {
		s := sampled{name: p.Name}
		if st, ok := p.state(); ok {
			s.st = &st
		}
		out = append(out, s)
	}
	return out
}

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: %w", p.Name, ErrNoDevice)
	}
	return p.cmd.Process.Signal(sig)
}

func (p *Proc) waitExit(timeout time.Duration) bool {
	p.mu.Lock()
	ch := p.exited
	p.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill sends SIGKILL (no release) and waits for the process to exit.
func (pc *ProcCluster) Kill(p *Proc) error {
	pc.event(p, EventKill, "kill -9 "+p.Name)
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	p.waitExit(10 * time.Second)
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
	return nil
}

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (pc *ProcCluster) Pause(p *Proc) error {
	pc.event(p, EventPause, "SIGSTOP "+p.Name)
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
	return p.signal(syscall.SIGSTOP)
}

func (pc *ProcCluster) Resume(p *Proc) error {
	pc.event(p, EventResume, "SIGCONT "+p.Name)
	err := p.signal(syscall.SIGCONT)
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
	return err
}

// Terminate sends SIGTERM (graceful: the node releases) and waits, then SIGKILL.
func (pc *ProcCluster) Terminate(p *Proc, kind string) error {
	if kind != "" {
		pc.event(p, kind, "SIGTERM "+p.Name)
	}
	if p.Paused() {
		_ = p.signal(syscall.SIGCONT)
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if !p.waitExit(2*pc.ttl + 10*time.Second) {
		_ = p.signal(syscall.SIGKILL)
		p.waitExit(5 * time.Second)
		return fmt.Errorf("%s did not stop on SIGTERM", p.Name)
	}
	return nil
}

// Restart runs the device again from its data dir.
func (pc *ProcCluster) Restart(p *Proc) error {
	if p.Running() {
		return fmt.Errorf("restart %s: already running", p.Name)
	}
	if err := p.spawn(append([]string{"run", "--data", p.Dir, "--listen", p.Listen}, pc.flags...)); err != nil {
		return err
	}
	pc.event(p, EventRestart, "restart "+p.Name)
	return nil
}

// Holder returns the process holding the lease (by its own state), with the epoch.
func (pc *ProcCluster) Holder() (*Proc, uint64, bool) {
	for _, p := range pc.Procs() {
		if st, ok := p.state(); ok && st.Lease.HeldByMe {
			return p, st.Lease.Epoch, true
		}
	}
	return nil, 0, false
}

// Close stops every process (holder first, SIGTERM then SIGKILL) and the recorder,
// and removes a temp dir.
func (pc *ProcCluster) Close() error {
	var errs []error
	ps := pc.Procs()
	if h, _, ok := pc.Holder(); ok {
		ps = append([]*Proc{h}, ps...)
	}
	for _, p := range ps {
		if p.Running() {
			if err := pc.Terminate(p, ""); err != nil {
				errs = append(errs, err)
			}
		}
		p.mu.Lock()
		if p.client != nil {
			p.client.Close()
			p.client = nil
		}
		p.mu.Unlock()
	}
	if pc.stop != nil {
		pc.stop()
		<-pc.done
		pc.stop = nil
	}
	if pc.tmp {
		_ = os.RemoveAll(pc.dir)
	}
	return errors.Join(errs...)
}

// chains reads every running device's chain over its API.
func (pc *ProcCluster) chains(ctx context.Context) ([]DeviceChain, error) {
	var out []DeviceChain
	for _, p := range pc.Procs() {
		if !p.Running() || p.Paused() {
			continue
		}
		p.mu.Lock()
		c := p.client
		p.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		dc := DeviceChain{Device: p.Name}
		var err error
		for ac := range c.Commits(cctx, 1, false) {
			if ac.Err != nil {
				err = ac.Err
				break
			}
			dc.Commits = append(dc.Commits, ac.Raw)
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: commits: %w", p.Name, err)
		}
		out = append(out, dc)
	}
	return out, nil
}

// procsDrill runs the shared waits over a ProcCluster.
type procsDrill struct {
	pc    *ProcCluster
	rand  *rand.Rand
	logf  func(string, ...any)
	limit time.Duration
}

func (d *procsDrill) waitHolder(ctx context.Context, minEpoch uint64, exclude *Proc) (*Proc, uint64, error) {
	var h *Proc
	var ep uint64
	err := d.pc.poll(ctx, d.limit, fmt.Sprintf("a holder above epoch %d", minEpoch), func() bool {
		p, e, ok := d.pc.Holder()
		if ok && e > minEpoch && p != exclude {
			h, ep = p, e
			return true
		}
		return false
	})
	return h, ep, err
}

func (d *procsDrill) takeover(ctx context.Context, at time.Time, ep uint64, exclude *Proc) error {
	h, ep2, err := d.waitHolder(ctx, ep, exclude)
	if err != nil {
		return err
	}
	d.logf("%s holds epoch %d (%.0f ms after the fault)", h.Name, ep2, float64(time.Since(at).Microseconds())/1000)
	return d.pc.poll(ctx, d.limit, "a commit in epoch "+fmt.Sprint(ep2), func() bool {
		st, ok := h.state()
		return ok && st.Head.Epoch >= ep2
	})
}

func (d *procsDrill) maxSeq() uint64 {
	var m uint64
	for _, p := range d.pc.Procs() {
		if st, ok := p.state(); ok && st.Head.Seq > m {
			m = st.Head.Seq
		}
	}
	return m
}

func (d *procsDrill) catchUp(ctx context.Context, p *Proc) error {
	target := d.maxSeq()
	return d.pc.poll(ctx, d.limit, p.Name+" to catch up", func() bool {
		st, ok := p.state()
		return ok && st.Head.Seq >= target
	})
}

func (d *procsDrill) settle(ctx context.Context) error {
	base := d.maxSeq()
	return d.pc.poll(ctx, d.limit, "the chain to grow under load", func() bool { return d.maxSeq() >= base+5 })
}

func (d *procsDrill) step(ctx context.Context, name string) error {
	h, ep, err := d.waitHolder(ctx, 0, nil)
	if err != nil {
		return err
	}
	at := time.Now()
	switch name {
	case "kill-holder":
		if err := d.pc.Kill(h); err != nil {
			return err
		}
		if err := d.takeover(ctx, at, ep, h); err != nil {
			return err
		}
		if err := d.pc.Restart(h); err != nil {
			return err
		}
		return d.catchUp(ctx, h)
	case "pause-holder":
		if err := d.pc.Pause(h); err != nil {
			return err
		}
		err := d.takeover(ctx, at, ep, h)
		select {
		case <-time.After(time.Until(at.Add(2 * d.pc.ttl))):
		case <-ctx.Done():
		}
		if rerr := d.pc.Resume(h); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		return d.catchUp(ctx, h)
	case "rolling-restart":
		var order []*Proc
		for _, p := range d.pc.Procs() {
			if p != h {
				order = append(order, p)
			}
		}
		for _, p := range append(order, h) {
			_, ep, err := d.waitHolder(ctx, 0, nil)
			if err != nil {
				return err
			}
			at := time.Now()
			if err := d.pc.Terminate(p, EventStop); err != nil {
				return err
			}
			if p == h {
				if err := d.takeover(ctx, at, ep, p); err != nil {
					return err
				}
			}
			if err := d.pc.Restart(p); err != nil {
				return err
			}
			if err := d.catchUp(ctx, p); err != nil {
				return err
			}
		}
		return nil
	case "release-handover":
		d.pc.event(h, EventRelease, "release "+h.Name)
		h.mu.Lock()
		c := h.client
		h.mu.Unlock()
		if err := c.Release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return d.takeover(ctx, at, ep, nil)
	}
	return fmt.Errorf("%w: scenario %q in procs mode (supported: %s)", ErrProcsUnavailable, name, strings.Join(ProcsScenarios, ", "))
}

// RunProcsScenario runs a scenario with one real `baton run` process per device
// (kill -9, SIGSTOP/SIGCONT, SIGTERM and restart), checking the same way as
// RunScenario through each device's API socket.
func RunProcsScenario(ctx context.Context, cfg ProcsConfig) (Report, error) {
	supported := false
	for _, s := range ProcsScenarios {
		supported = supported || s == cfg.Scenario
	}
	if !supported {
		return Report{}, fmt.Errorf("%w: scenario %q in procs mode (supported: %s)", ErrProcsUnavailable, cfg.Scenario, strings.Join(ProcsScenarios, ", "))
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.LoadRate <= 0 {
		cfg.LoadRate = 40
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "  %7.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	pc, err := NewProcCluster(cfg, func(e Event) { logf("%-9s %s", e.Kind, e.Label) })
	if err != nil {
		return Report{}, err
	}
	defer pc.Close()
	d := &procsDrill{pc: pc, rand: rand.New(rand.NewSource(cfg.Seed)), logf: logf, limit: 4*pc.ttl + 15*time.Second}
	rep := Report{Scenario: cfg.Scenario, Seed: cfg.Seed, Started: start,
		Params: Params{Nodes: len(pc.procs), TTL: pc.ttl, Tick: pc.tick, Rounds: cfg.Rounds, Procs: true}}
	fail := func(err error) {
		if err != nil && rep.Error == "" {
			rep.Error = err.Error()
			logf("ERROR %v", err)
		}
	}
	logf("scenario %s with %d baton processes (%s)", cfg.Scenario, len(pc.procs), pc.bin)
	var load *Load
	if err := pc.Start(ctx); err != nil {
		fail(err)
	} else {
		logf("cluster of %d processes up", len(pc.procs))
		load, err = StartLoad(ctx, LoadConfig{Rate: cfg.LoadRate, Max: 1 << 30, Timeout: 2*pc.ttl + 3*time.Second, Prefix: cfg.Scenario,
			Targets: func() []Target {
				var ts []Target
				for _, p := range pc.Procs() {
					p.mu.Lock()
					c := p.client
					p.mu.Unlock()
					if c != nil && p.Running() && !p.Paused() {
						ts = append(ts, Target{Device: p.Name, Submitter: c})
					}
				}
				return ts
			}})
		fail(err)
		for r := 0; r < cfg.Rounds && rep.Error == "" && load != nil; r++ {
			logf("round %d/%d", r+1, cfg.Rounds)
			if err := d.settle(ctx); err != nil {
				fail(err)
				break
			}
			fail(d.step(ctx, cfg.Scenario))
		}
		if load != nil {
			if rep.Error == "" {
				fail(d.settle(ctx))
			}
			load.Stop()
			rep.Counts = load.Counts()
			logf("load stopped: %d submitted, %d acknowledged, %d failed", rep.Counts.Submitted, rep.Counts.Acked, rep.Counts.Failed)
		}
	}
	for _, p := range pc.Procs() {
		if p.Paused() {
			fail(pc.Resume(p))
		}
		p.mu.Lock()
		started := p.started
		p.mu.Unlock()
		if started && !p.Running() {
			fail(pc.Restart(p))
		}
	}
	fail(pc.poll(ctx, d.limit, "convergence", func() bool {
		var head string
		for _, p := range pc.Procs() {
			st, ok := p.state()
			if !ok || st.Pending > 0 || (head != "" && st.Head.Hash != head) || st.Head.Seq == 0 {
				return false
			}
			head = st.Head.Hash
		}
		return true
	}))
	var acks []Ack
	if load != nil {
		acks = load.Acks()
	}
	chains, err := pc.chains(ctx)
	fail(err)
	rep.Check = Check(CheckInput{Chain: pc.chain, Devices: chains, Acked: acks, Observed: pc.rec.observed()})
	rep.Finished = time.Now()
	for _, p := range pc.Procs() {
		id := ""
		if st, ok := p.state(); ok {
			id = st.ID
		}
		rep.Devices = append(rep.Devices, DeviceInfo{Name: p.Name, ID: id})
	}
	pc.rec.fill(&rep)
	attributeFailovers(&rep)
	rep.Finish()
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
		if logs := tailLogs(pc); logs != "" {
			logf("process logs (tail):\n%s", logs)
		}
	}
	var durs []string
	for _, f := range rep.Check.Failovers {
		durs = append(durs, failoverText(f))
	}
	logf("%s %s: %d commits, %d intents, %d acked, forks %d, lost %d, duplicates %d, invalid %d, failovers [%s]",
		verdict, cfg.Scenario, rep.Check.Commits, rep.Check.Intents, rep.Check.Acked, rep.Check.Forks, rep.Check.Lost,
		rep.Check.Dupes, rep.Check.Invalid, strings.Join(durs, ", "))
	for _, f := range rep.Check.Findings {
		logf("  finding: %s", f)
	}
	return rep, nil
}

// tailLogs returns the last lines of each process log (for a failed drill).
func tailLogs(pc *ProcCluster) string {
	var b strings.Builder
	for _, p := range pc.Procs() {
		f, err := os.Open(p.Dir + ".log")
		if err != nil {
			continue
		}
		var lines []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if len(lines) > 8 {
				lines = lines[1:]
			}
		}
		f.Close()
		for _, l := range lines {
			fmt.Fprintf(&b, "    %s: %s\n", p.Name, l)
		}
	}
	return b.String()
}
