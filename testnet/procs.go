package testnet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/hashicorp/raft"
)

// DefaultProcsRaftTimeout is the --raft-timeout the processes run with.
const DefaultProcsRaftTimeout = 300 * time.Millisecond

// ProcsConfig configures a ProcCluster.
type ProcsConfig struct {
	// Bin is the baton binary (default: this executable).
	Bin   string
	Nodes int           // default 3
	TTL   time.Duration // default 1 s
	Tick  time.Duration // default 100 ms
	// RaftTimeout is each process's --raft-timeout (default 300 ms; negative: the
	// binary's own default, node.RaftTimeouts of the TTL, as production runs).
	RaftTimeout time.Duration
	// Dir holds the data dirs and logs (default: a temp dir, removed by Close).
	Dir string
	// SampleEvery is the timeline's sampling period over the API (default 40 ms;
	// < 0: no timeline, so that measurements see idle processes).
	SampleEvery time.Duration
	// OnEvent, optional, is called for every timeline event.
	OnEvent func(Event)
	// Flags, optional, returns extra flags for slot i's `baton run` or `join`.
	Flags func(i int) []string
	// Listen, optional, returns slot i's --listen address (default: a free
	// loopback port). Exec, optional, returns a command prefix for slot i's
	// processes (e.g. `ip netns exec NS`: the NAT tests' namespaces).
	Listen func(i int) string
	Exec   func(i int) []string
	// InviteFrom, optional, returns the slot of the member whose invite slot i
	// joins with at Start (default: the first running member).
	InviteFrom func(i int) int
	// BeforeInvite, optional, runs before each invite at Start (an error stops it).
	BeforeInvite func(ctx context.Context, inviter, joiner *Device) error
	// Format is the chain's commit format: "" or "baton" (an Ed25519 chain key), or
	// "atproto" (`baton init --new-chain --format atproto`: a P-256 key).
	Format string
}

// proc is one `baton run` process of a device.
type proc struct {
	// port is the device's libp2p TCP port on 127.0.0.1: 0 until its first process
	// bound one (it listens on port 0 and the kernel picks a free port, so two
	// devices never get one port) and logged it; every restart reuses it, as an
	// operator keeps a device's --listen stable.
	port int
	// listen, when set (ProcsConfig.Listen), is the device's --listen address
	// instead of a loopback port.
	listen string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	// stopping: the harness stopped (or is stopping) this process; its exit is no
	// failure (Exited).
	stopping bool
	client   *api.Client
}

func (p *proc) alive() bool {
	p.mu.Lock()
	ch := p.exited
	p.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func (p *proc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *proc) api() *api.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.client
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return ErrNoDevice
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		p.stopping = true
	}
	return p.cmd.Process.Signal(sig)
}

func (p *proc) setStopping() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
}

// waitExit waits for the process to exit (on its exit channel), at most timeout.
func (p *proc) waitExit(timeout time.Duration) bool {
	p.mu.Lock()
	ch := p.exited
	p.mu.Unlock()
	if ch == nil {
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// ProcCluster is a Net of real baton processes on 127.0.0.1, formed through the CLI
// (init, invite, join, run, leave) and driven through signals and each device's API
// socket (api.Client).
type ProcCluster struct {
	*netBase
	cfg   ProcsConfig
	tmp   bool
	flags []string
}

// NewProcCluster prepares the devices' slots under cfg.Dir (a temp dir if empty).
func NewProcCluster(cfg ProcsConfig) (*ProcCluster, error) {
	if cfg.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: no binary given and no executable path: %w", ErrProcsUnavailable, err)
		}
		cfg.Bin = exe
	}
	if fi, err := os.Stat(cfg.Bin); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("%w: baton binary %q not found", ErrProcsUnavailable, cfg.Bin)
	}
	if _, err := chainKeyGen(cfg.Format); err != nil {
		return nil, err
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
	if cfg.RaftTimeout == 0 {
		cfg.RaftTimeout = DefaultProcsRaftTimeout
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = 2 * DefaultSampleEvery
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes || cfg.Tick <= 0 || cfg.Tick >= cfg.TTL {
		return nil, fmt.Errorf("%w: nodes %d, tick %s, ttl %s", ErrBadConfig, cfg.Nodes, cfg.Tick, cfg.TTL)
	}
	flags := []string{"--ttl", cfg.TTL.String(), "--tick", cfg.Tick.String(), "--log-level", "info"}
	raftTimeout := cfg.RaftTimeout
	if raftTimeout > 0 {
		flags = append(flags, "--raft-timeout", raftTimeout.String())
	} else {
		var rc raft.Config
		node.RaftTimeouts(cfg.TTL)(&rc)
		raftTimeout = rc.ElectionTimeout
	}
	pc := &ProcCluster{cfg: cfg, netBase: newBase(KindProcs, cfg.TTL, cfg.Tick, 2*raftTimeout, cfg.OnEvent), flags: flags}
	if pc.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "baton-procs-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		pc.cfg.Dir, pc.tmp = d, true
	}
	// Run a private copy: a rebuild of the binary during a long drill must not mix
	// versions (a restarted device running other code than its peers).
	bin := filepath.Join(pc.cfg.Dir, "baton")
	if err := copyFile(cfg.Bin, bin); err != nil {
		return nil, fmt.Errorf("%w: copy the binary: %w", ErrProcsUnavailable, err)
	}
	pc.cfg.Bin = bin
	for i := 0; i < cfg.Nodes; i++ {
		d := pc.addSlot(pc.cfg.Dir, nil)
		d.proc = &proc{}
		if cfg.Listen != nil {
			d.proc.listen = cfg.Listen(i)
		}
	}
	pc.state = pc.stateOf
	pc.target = func(d *Device) Submitter {
		if c := d.proc.api(); c != nil {
			return c
		}
		return nil
	}
	pc.readLog = func(d *Device, from uint64, fn func(intentlog.RaftEntry) error) (bool, error) {
		if d.proc.alive() {
			return false, nil // the process holds raft.db's lock
		}
		if _, err := os.Stat(filepath.Join(d.Dir, intentlog.RaftFile)); err != nil {
			return false, nil
		}
		return true, intentlog.ReadRaftLog(d.Dir, from, fn)
	}
	return pc, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// startedPort matches the port of the 127.0.0.1 address in a "node started" line.
var startedPort = regexp.MustCompile(`/ip4/127\.0\.0\.1/tcp/([0-9]+)`)

// loggedPort returns the port the last process of the device logged in its "node
// started" line (0 if none did).
func loggedPort(logFile string) int {
	b, err := os.ReadFile(logFile)
	if err != nil {
		return 0
	}
	port := 0
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "node started") {
			continue
		}
		if m := startedPort.FindStringSubmatch(l); m != nil {
			if p, err := strconv.Atoi(m[1]); err == nil && p > 0 {
				port = p
			}
		}
	}
	return port
}

// Bin is the baton binary the devices run (a copy of ProcsConfig.Bin in the
// cluster's directory).
func (pc *ProcCluster) Bin() string { return pc.cfg.Bin }

// Pid returns d's process ID (0 while down).
func (pc *ProcCluster) Pid(d *Device) int {
	d.proc.mu.Lock()
	defer d.proc.mu.Unlock()
	if d.proc.cmd == nil || d.proc.cmd.Process == nil {
		return 0
	}
	return d.proc.cmd.Process.Pid
}

// Client returns d's API client (nil before its first start).
func (pc *ProcCluster) Client(d *Device) *api.Client { return d.proc.api() }

// runCLI runs the binary to completion (bounded) and returns its stdout.
func (pc *ProcCluster) runCLI(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pc.cfg.Bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("baton %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// stateOf asks the device's API for its state (bounded: a frozen process does not
// answer).
func (pc *ProcCluster) stateOf(d *Device) (node.State, bool) {
	p := d.proc
	if !p.alive() || p.isPaused() {
		return node.State{}, false
	}
	c := p.api()
	if c == nil {
		return node.State{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	st, err := c.State(ctx)
	if err != nil {
		return node.State{}, false
	}
	d.mu.Lock()
	d.id = st.ID
	d.mu.Unlock()
	return st, true
}

// Start initialises and starts every device: d0 with a new chain (it bootstraps),
// the others from an invite (join), one at a time.
func (pc *ProcCluster) Start(ctx context.Context) error {
	pc.startRecorder(pc.cfg.SampleEvery, nil)
	ds := pc.Devices()
	initArgs := []string{"init", "--data", ds[0].Dir, "--new-chain"}
	if pc.cfg.Format != "" {
		initArgs = append(initArgs, "--format", pc.cfg.Format)
	}
	out, err := pc.runCLI(ctx, initArgs...)
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "did:key:") {
			pc.setChain(f)
		}
	}
	if pc.Chain() == "" {
		return fmt.Errorf("baton init printed no chain did: %q", out)
	}
	if err := pc.spawn(ds[0], "run"); err != nil {
		return err
	}
	if err := pc.until(ctx, ds[0], ds[0].Name+" to hold the lease", func() bool {
		st, ok := pc.stateOf(ds[0])
		return ok && st.Lease.HeldByMe
	}); err != nil {
		return err
	}
	for _, d := range ds[1:] {
		if err := pc.join(ctx, d, d.Index+1); err != nil {
			return err
		}
	}
	return nil
}

// join makes d join through an invite of a running member and waits until it counts
// members and knows the leader.
func (pc *ProcCluster) join(ctx context.Context, d *Device, members int) error {
	var from *Device
	for _, o := range pc.Devices() {
		if o != d && o.Running() && !o.Paused() && !o.Left() {
			from = o
			break
		}
	}
	if pc.cfg.InviteFrom != nil {
		if i := pc.cfg.InviteFrom(d.Index); i >= 0 && i < len(pc.Devices()) {
			if o := pc.Devices()[i]; o != d && o.Running() && !o.Paused() && !o.Left() {
				from = o
			}
		}
	}
	if from == nil {
		return fmt.Errorf("join %s: %w: no running member to invite it", d.Name, ErrNoDevice)
	}
	if pc.cfg.BeforeInvite != nil {
		if err := pc.cfg.BeforeInvite(ctx, from, d); err != nil {
			return fmt.Errorf("join %s: %w", d.Name, err)
		}
	}
	invite, err := pc.runCLI(ctx, "invite", "--data", from.Dir, "--with-chain-key", "--valid-for", "10m")
	if err != nil {
		return err
	}
	// The invite goes in a file beside the data dir, never in argv (ps shows argv).
	inviteFile := d.Dir + ".invite"
	if err := os.WriteFile(inviteFile, []byte(strings.TrimSpace(invite)+"\n"), 0o600); err != nil {
		return fmt.Errorf("%s invite: %w", d.Name, err)
	}
	// It carries the chain key: gone once the join is over, whatever its outcome.
	defer os.Remove(inviteFile)
	if err := pc.spawn(d, "join", "--invite-file", inviteFile); err != nil {
		return err
	}
	return pc.until(ctx, d, d.Name+" to join", func() bool {
		st, ok := pc.stateOf(d)
		return ok && st.Members >= members && st.Raft.Leader != ""
	})
}

// until is wait.Until bounded by a start-up allowance; it fails at once when d's
// process exits meanwhile (no wait for a process that is gone).
func (pc *ProcCluster) until(ctx context.Context, d *Device, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 4*pc.cfg.TTL+30*time.Second)
	defer cancel()
	var exited error
	if err := wait.Until(ctx, what, func() bool {
		if exited = pc.Exited(d); exited != nil {
			return true
		}
		return cond()
	}); err != nil {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	if exited != nil {
		return fmt.Errorf("waiting for %s: %w", what, exited)
	}
	return nil
}

// Exited returns an error (ErrExited, with how the process ended and the last lines
// of its log) when d's process was started and has exited without the harness
// stopping it; nil while it runs or after Stop, Kill or Leave.
func (pc *ProcCluster) Exited(d *Device) error {
	p := d.proc
	p.mu.Lock()
	cmd, ch, stopping := p.cmd, p.exited, p.stopping
	p.mu.Unlock()
	if ch == nil || stopping {
		return nil
	}
	select {
	case <-ch:
	default:
		return nil
	}
	return fmt.Errorf("%w: %s %s:\n%s", ErrExited, d.Label(), cmd.ProcessState, tailFile(d.Dir+".log", 5))
}

// spawn starts `baton <verb> --data DIR --listen ADDR <flags> [arg]` with its output
// appended to <dir>.log.
func (pc *ProcCluster) spawn(d *Device, verb string, arg ...string) error {
	p := d.proc
	if err := os.MkdirAll(filepath.Dir(d.Dir), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(d.Dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", d.Name, err)
	}
	if p.port == 0 {
		p.port = loggedPort(d.Dir + ".log")
	}
	listen := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", p.port)
	if p.listen != "" {
		listen = p.listen
	}
	args := append([]string{verb, "--data", d.Dir, "--listen", listen}, pc.flags...)
	if pc.cfg.Flags != nil {
		args = append(args, pc.cfg.Flags(d.Index)...)
	}
	args = append(args, arg...)
	cmd := exec.Command(pc.cfg.Bin, args...)
	if pc.cfg.Exec != nil {
		if pre := pc.cfg.Exec(d.Index); len(pre) > 0 {
			cmd = exec.Command(pre[0], append(append(pre[1:len(pre):len(pre)], pc.cfg.Bin), args...)...)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited, p.paused, p.stopping = cmd, exited, false, false
	if p.client == nil {
		if c, err := api.NewClient(filepath.Join(d.Dir, api.SocketFile), ""); err == nil {
			p.client = c
		}
	}
	p.mu.Unlock()
	d.mu.Lock()
	d.started = true
	d.mu.Unlock()
	return nil
}

// stopAll stops every process (SIGTERM then SIGKILL) and the recorder, reading each
// stopped device's Raft log: the holder first, alone (its release needs a quorum),
// then the others at once.
func (pc *ProcCluster) stopAll() error {
	var errs []error
	var mu sync.Mutex
	stop := func(d *Device) {
		if err := pc.terminate(d); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	h, _, held := pc.Holder()
	if held {
		stop(h)
	}
	var wg sync.WaitGroup
	for _, d := range pc.Devices() {
		if d.proc.alive() && !(held && d == h) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stop(d)
			}()
		}
	}
	wg.Wait()
	pc.stopRecorder()
	return errors.Join(errs...)
}

// Close stops every process and removes a temp dir.
func (pc *ProcCluster) Close() error {
	err := pc.stopAll()
	for _, d := range pc.Devices() {
		d.proc.mu.Lock()
		if d.proc.client != nil {
			d.proc.client.Close()
			d.proc.client = nil
		}
		d.proc.mu.Unlock()
	}
	if pc.tmp {
		_ = os.RemoveAll(pc.cfg.Dir)
	}
	return err
}

// Collect reads every running device's chain and rejection counters over its API,
// stops the processes and reads their Raft logs from disk.
func (pc *ProcCluster) Collect(ctx context.Context) (CheckInput, error) {
	in := CheckInput{Chain: pc.Chain(), Observed: pc.observed(), Names: names(pc.Devices()), Rejections: map[string]uint64{}}
	var errs []error
	for _, d := range pc.Devices() {
		c := d.proc.api()
		if c == nil || !d.proc.alive() || d.proc.isPaused() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		dc := DeviceChain{Device: d.Name}
		st, err := c.State(cctx)
		dc.Applied = st.Raft.AppliedIndex
		if err == nil {
			for ac := range c.Commits(cctx, 1, false) {
				if ac.Err != nil {
					err = ac.Err
					break
				}
				dc.Commits = append(dc.Commits, ac.Raw)
			}
		}
		if err == nil && FormatOf(in.Chain).ID() == chain.FormatAtproto {
			err = procRepoHead(cctx, c, &dc)
		}
		if err == nil {
			var text string
			if text, err = c.Metrics(cctx); err == nil {
				for k, v := range parseRejections(text) {
					in.Rejections[k] = max(in.Rejections[k], v)
				}
			}
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Label(), err))
			continue
		}
		in.Devices = append(in.Devices, dc)
	}
	errs = append(errs, pc.stopAll())
	pc.Harvest()
	sg := pc.sigs.signatures()
	in.Signatures = &sg
	return in, errors.Join(errs...)
}

// parseRejections reads baton_apply_rejections_total{reason="..."} N lines of a
// Prometheus text exposition.
func parseRejections(text string) map[string]uint64 {
	out := map[string]uint64{}
	const prefix = `baton_apply_rejections_total{reason="`
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		reason, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[reason] = uint64(v)
		}
	}
	return out
}

// tailFile returns the last lines of a file, indented.
func tailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	all = all[max(0, len(all)-lines):]
	return "    " + strings.Join(all, "\n    ")
}

// TailLogs returns the last lines of each process log (for a failed drill).
func (pc *ProcCluster) TailLogs(lines int) string {
	var b strings.Builder
	for _, d := range pc.Devices() {
		f, err := os.Open(d.Dir + ".log")
		if err != nil {
			continue
		}
		var tail []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			tail = append(tail, sc.Text())
			if len(tail) > lines {
				tail = tail[1:]
			}
		}
		f.Close()
		for _, l := range tail {
			fmt.Fprintf(&b, "    %s: %s\n", d.Name, l)
		}
	}
	return b.String()
}
