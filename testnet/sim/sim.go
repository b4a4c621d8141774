package sim

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	mrand "math/rand"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/signer/chain"
)

// Defaults for Config fields left zero.
const (
	DefaultDuration = 8 * time.Second
	DefaultTTL      = time.Second
	DefaultTick     = 100 * time.Millisecond
)

// Config configures one simulated run. Everything random in a run is drawn from Seed.
type Config struct {
	Seed int64
	// Devices is the cluster size, 3 to 5; 0 draws it from the seed.
	Devices int
	// Duration is the virtual time of the fault phase (DefaultDuration if zero); the
	// recovery (probe, convergence) comes after it.
	Duration time.Duration
	// Profile names the fault mix and load ("" draws it from the seed: "calm" for one
	// seed in ten, "mixed" otherwise). See ProfileNames.
	Profile string
	// TTL and Tick of every device (DefaultTTL, DefaultTick); Raft's timeouts scale
	// with the TTL.
	TTL, Tick time.Duration
	// Knobs put back fixed bugs (see Knobs).
	Knobs Knobs
	// Format is the chain's commit format: "" or "baton" (an Ed25519 chain key), or
	// "atproto" (a P-256 key: the genesis declares an atproto repository; see
	// format.go for what the mode adds).
	Format string `json:",omitempty"`
	// Dir is where the run's data directories go ("": /dev/shm if present, else
	// os.TempDir()). They are removed after the run unless Keep.
	Dir  string
	Keep bool
	// Logger receives the nodes' logs (nil: discarded).
	Logger *slog.Logger `json:"-"`
	// Trace, if set, receives every event as it happens.
	Trace func(Event) `json:"-"`
	// SeedGlobalRand seeds math/rand's global source from Seed when the run starts:
	// Raft draws its election timeouts from it (it takes GODEBUG=randseednop=0, which
	// the package's tests and `baton sim --seed` set). Only for a run alone in its
	// process: parallel runs share the source.
	SeedGlobalRand bool
}

func (c *Config) setDefaults() error {
	if c.Devices == 0 {
		c.Devices = 3 + int(uint64(c.Seed)%3)
	}
	if c.Devices < 3 || c.Devices > 5 {
		return fmt.Errorf("sim: %d devices, want 3 to 5", c.Devices)
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.Tick >= c.TTL || c.TTL%time.Millisecond != 0 {
		return fmt.Errorf("sim: tick %v must be below the ttl %v (whole milliseconds)", c.Tick, c.TTL)
	}
	if c.Profile == "" {
		c.Profile = seedProfile(c.Seed)
	}
	if err := checkFormat(c.Format); err != nil {
		return err
	}
	p, err := LookupProfile(c.Profile)
	if err != nil {
		return err
	}
	if c.Duration == 0 {
		c.Duration = cmp.Or(p.Duration, DefaultDuration)
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			c.Dir = "/dev/shm"
		}
	}
	return nil
}

// Flags returns the command-line flags that reproduce c with `go test` (the seed and
// whatever differs from what the seed alone implies).
func (c Config) Flags() []string {
	out := []string{fmt.Sprintf("-seed %d", c.Seed)}
	if c.Devices != 0 && c.Devices != 3+int(uint64(c.Seed)%3) {
		out = append(out, fmt.Sprintf("-nodes %d", c.Devices))
	}
	p, _ := LookupProfile(cmp.Or(c.Profile, seedProfile(c.Seed)))
	if c.Duration != 0 && c.Duration != cmp.Or(p.Duration, DefaultDuration) {
		out = append(out, "-time "+c.Duration.String())
	}
	if c.Profile != "" && c.Profile != seedProfile(c.Seed) {
		out = append(out, "-profile "+c.Profile)
	}
	if c.TTL != 0 && c.TTL != DefaultTTL {
		out = append(out, "-ttl "+c.TTL.String())
	}
	if c.Tick != 0 && c.Tick != DefaultTick {
		out = append(out, "-tick "+c.Tick.String())
	}
	if k := c.Knobs.String(); k != "" {
		out = append(out, "-knobs "+k)
	}
	if c.atproto() {
		out = append(out, "-format "+c.Format)
	}
	return out
}

// ReplayCommand returns the commands that replay c's schedule.
func (c Config) ReplayCommand() string {
	flags := strings.Join(c.Flags(), " ")
	return fmt.Sprintf("go test ./testnet/sim -run 'TestSim$' -cpu 1 %s   (or: baton sim %s)", flags,
		strings.ReplaceAll(" "+flags, " -", " --")[1:])
}

// Result is what one run found.
type Result struct {
	Config     Config // with defaults filled in
	Violations []Violation
	Found      map[string]int // violations found, by kind (Violations keeps the first 20 of each)
	Faults     map[string]int // faults injected, by kind
	Skipped    int            // scheduled faults that found no target (no holder, device down)
	Net        NetStats
	Commits    int // length of the applied chain
	Ops        int // intents in it
	Acked      int // distinct intent IDs acknowledged to clients
	Signed     int // distinct commits the chain key signed
	Refused    int // of those, never applied
	// Failover is the time from the end of the faults to the probe intent's
	// signature (-1 if it was never signed).
	Failover time.Duration
	Virtual  time.Duration // virtual time of the whole run
	Real     time.Duration
	// RaftFutureLeaks counts goroutines of the code under test left blocked, once
	// every device had stopped, only in a hashicorp/raft future's Error: a future
	// Raft never answered after its Shutdown (hashicorp/raft#498, open upstream: an
	// entry or barrier handed to the FSM goroutine's buffered queue just before
	// Shutdown is dropped). Not a violation (nothing of baton's is left running or
	// wrong); counted and reported with the search's summary.
	RaftFutureLeaks int `json:",omitempty"`
	// RaftTransferLeaks counts, likewise, the goroutines of a hashicorp/raft
	// leadership transfer left blocked: its replication goroutine stopped (the leader
	// stepped down) while the transfer waited to hand it a request, and the leader
	// loop's goroutine waits for the transfer (hashicorp/raft#696, open upstream, fix
	// proposed in #708). The same bug leaves the transfer flag set: a device that
	// leads again refuses every Apply, which the liveness checks see. The leak itself
	// is not a violation.
	RaftTransferLeaks int `json:",omitempty"`
	// SameSeq counts, by cause, the times the chain key signed a second commit for a
	// seq it had signed (bump: the same device's next epoch after a refusal;
	// handover: another device after a hold ended with commits in flight), and on an
	// atproto chain the second commits signed with a rev already signed (same_rev).
	SameSeq map[string]int `json:",omitempty"`
	// Events are the run's last events (up to 4096), kept only when it found a
	// violation (WriteFiles writes them out).
	Events []Event
}

// WriteFiles writes a failed run's report (seed-N.txt) and its events
// (seed-N.events) into dir; it does nothing for a run without violations.
func (r *Result) WriteFiles(dir string) error {
	if r.OK() {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, fmt.Sprintf("seed-%d", r.Config.Seed))
	report := r.Summary() + "\n\n" + r.Report()
	if err := os.WriteFile(base+".txt", []byte(report), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range r.Events {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return os.WriteFile(base+".events", []byte(b.String()), 0o644)
}

// OK reports whether the run found no violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Report formats the violations of r: the first of each kind in full (with its
// replay command and the events before it), the others one line each.
func (r *Result) Report() string {
	var b strings.Builder
	full := map[string]bool{}
	var rest []string
	for _, v := range r.Violations {
		if !full[v.Kind] {
			full[v.Kind] = true
			b.WriteString(v.Report(r.Config))
			continue
		}
		rest = append(rest, fmt.Sprintf("  also %s at %.3fs: %s", v.Kind, v.At.Seconds(), v.Detail))
	}
	if len(rest) > 0 {
		fmt.Fprintf(&b, "seed %d, %d more violations:\n%s\n", r.Config.Seed, len(rest), strings.Join(rest, "\n"))
	}
	return b.String()
}

// Summary is one line about r.
func (r *Result) Summary() string {
	kinds := map[string]int{}
	for _, v := range r.Violations {
		kinds[v.Kind] = max(kinds[v.Kind], r.Found[v.Kind], 1)
	}
	var vs []string
	for _, k := range sortedKeys(kinds) {
		vs = append(vs, fmt.Sprintf("%s×%d", k, kinds[k]))
	}
	verdict := "ok"
	if len(vs) > 0 {
		verdict = strings.Join(vs, " ")
	}
	if r.RaftFutureLeaks > 0 {
		verdict += fmt.Sprintf(" (%d goroutines left on a raft future after Shutdown, hashicorp/raft#498)", r.RaftFutureLeaks)
	}
	prof := r.Config.Profile
	if r.Config.atproto() {
		prof += ", atproto"
	}
	return fmt.Sprintf("seed %d (%s, %d devices): %s; %d faults, %d commits, %d ops, %d acked, %d signed, %d refused, failover %v, %v virtual in %v",
		r.Config.Seed, prof, r.Config.Devices, verdict, sum(r.Faults), r.Commits, r.Ops, r.Acked, r.Signed, r.Refused,
		r.Failover.Round(time.Millisecond), r.Virtual.Round(time.Millisecond), r.Real.Round(time.Millisecond))
}

// Run runs one simulation in a synctest bubble of t (virtual time) and returns what
// it found. It fails t only if the run could not be set up; violations are in the
// Result.
func Run(t *testing.T, cfg Config) *Result {
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	realStart := time.Now()
	var res *Result
	var setupErr error
	func() {
		// Virtual time stops when the bubble's main goroutine returns; goroutines of
		// the code under test still blocked then (on a channel, a timer) make
		// synctest.Test panic: a device that did not shut down.
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			msg := fmt.Sprint(p)
			if !strings.Contains(msg, "deadlock") || res == nil {
				panic(p)
			}
			if future, transfer := raftLeaks(); future+transfer > 0 {
				res.RaftFutureLeaks, res.RaftTransferLeaks = future, transfer
				return
			}
			res.Violations = append(res.Violations, Violation{Kind: VLeak, At: res.Virtual, Dev: -1,
				Detail: msg + "\n" + bubbleStacks()})
		}()
		if cfg.SeedGlobalRand {
			mrand.Seed(cfg.Seed) //lint:ignore SA1019 the point is the global source Raft uses
		}
		synctest.Test(t, func(t *testing.T) {
			w, err := newWorld(cfg)
			if err != nil {
				setupErr = err
				return
			}
			res = w.run()
		})
	}()
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	res.Real = time.Since(realStart)
	return res
}

// raftLeaks returns how many goroutines are left blocked in synctest bubbles if every
// one of them is a known hashicorp/raft leak: waiting in a future's Error
// (Result.RaftFutureLeaks), or a leadership transfer whose replication goroutine
// stopped, and the leader loop's goroutine waiting for it (Result.RaftTransferLeaks);
// else 0, 0.
func raftLeaks() (future, transfer int) { return classifyRaftLeaks(bubbleGoroutines()) }

// classifyRaftLeaks is raftLeaks for the goroutine stacks gs (runtime.Stack's form).
func classifyRaftLeaks(gs []string) (future, transfer int) {
	for _, g := range gs {
		lines := strings.Split(g, "\n")
		if len(lines) < 2 {
			return 0, 0
		}
		switch top := lines[1]; {
		case strings.HasPrefix(top, "github.com/hashicorp/raft.(*deferError).Error("):
			future++
		case strings.HasPrefix(top, "github.com/hashicorp/raft.(*Raft).leadershipTransfer("),
			strings.HasPrefix(top, "github.com/hashicorp/raft.(*Raft).leaderLoop.func2("):
			transfer++
		default:
			return 0, 0
		}
	}
	return future, transfer
}

// bubbleGoroutines returns the stack of every goroutine in a synctest bubble.
func bubbleGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "synctest bubble") {
			out = append(out, g)
		}
	}
	return out
}

// bubbleStacks returns the stacks of the goroutines left blocked in synctest
// bubbles (a leak report).
func bubbleStacks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "synctest bubble") {
			out = append(out, g)
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... %d more", len(out)-20))
	}
	return strings.Join(out, "\n\n")
}

// world is one run: the devices, the network, the clients and the checkers.
type world struct {
	cfg   Config
	prof  Profile
	start time.Time
	ev    *eventRing
	nw    *network
	devs  []*device
	ids   []string
	index map[raft.ServerAddress]int
	dir   string
	key   chain.Key
	sigs  *signatures
	chk   *checker
	acts  []action

	// sameSeq counts the seqs the key signed more than once, by cause
	// (check_refused.go).
	sameSeq map[string]int
	// reported: refusal and health findings already reported, by device and
	// incarnation (check_refused.go).
	reported map[string]bool

	done       chan struct{} // closed when the run shuts down (monitors stop)
	recovering chan struct{} // closed when the fault phase ends
	monWG      sync.WaitGroup
	opWG       sync.WaitGroup // fault actions in flight
	loadWG     sync.WaitGroup // clients

	mu         sync.Mutex
	violations []Violation
	vseen      map[string]bool
	vcount     map[string]int // violations found, by kind (at most keptPerKind kept)
	faults     map[string]int
	skipped    int
	active     map[int]func()    // fault ID -> its undo
	linkFs     map[int]linkFault // active link faults by fault ID
	stopLoad   bool              // the fault phase is over: clients start no new intents
	healed     bool              // the fault phase is over: actions that start now do nothing
	stepped    bool              // some clock was stepped (the failover bound doubles)
	faultFree  bool              // nothing at all was injected
	giveUpAt   time.Time         // clients stop retrying (zero: never)

	// repairDown: dev+1 of the device down from a repair, lost-db or restore fault
	// (faults_repair.go), 0: none; under mu.
	repairDown int
	// unsynced: devices whose Raft log a repair, lost-db or restore fault dropped or
	// rolled back and that have not been seen caught up since (running with no
	// fence up); under mu. Down or fenced, they hold no copy a repair elsewhere
	// could count on (faults_repair.go, othersCatchingUp).
	unsynced map[int]uint64 // dev -> the others' applied index when it lost its log
	// majorityRepaired: a repairmajority fault ran (faults_repair_majority.go): no
	// liveness is asked after it, the history's survival instead; under mu.
	majorityRepaired bool
	// copies: the kept copies of each device's data dir, oldest first; copyN numbers
	// them; under mu (faults_timetravel.go).
	copies map[int][]*dirCopy
	copyN  int
	// clone: the running clone of a device, nil mostly; under mu (faults_clone.go).
	clone *device
	// setupEnd: when the cluster of a FounderAlone profile was complete; the
	// schedule's times count from there.
	setupEnd time.Duration
}

type linkFault struct {
	links [][2]int
	f     linkFaults
}

// Raft's timeouts as fractions of the TTL (1 s: heartbeat and election 200 ms,
// leader lease 100 ms, commit 10 ms), and its snapshots made small so that restarts
// and lagging followers go through snapshot restore and InstallSnapshot.
func (w *world) raftConfig(c *raft.Config) {
	ttl := w.cfg.TTL
	c.HeartbeatTimeout = ttl / 5
	c.ElectionTimeout = ttl / 5
	c.LeaderLeaseTimeout = ttl / 10
	c.CommitTimeout = ttl / 100
	c.SnapshotThreshold = 256
	c.SnapshotInterval = ttl
	c.TrailingLogs = 128
}

func (w *world) electionTimeout() time.Duration { return w.cfg.TTL / 5 }

func newWorld(cfg Config) (*world, error) {
	prof, _ := LookupProfile(cfg.Profile)
	w := &world{cfg: cfg, prof: prof, start: time.Now(), done: make(chan struct{}), recovering: make(chan struct{}),
		vseen: map[string]bool{}, vcount: map[string]int{}, faults: map[string]int{}, active: map[int]func(){}, linkFs: map[int]linkFault{},
		index: map[raft.ServerAddress]int{}, copies: map[int][]*dirCopy{}}
	w.ev = newEventRing(w.start, cfg.Trace)
	dir, err := os.MkdirTemp(cfg.Dir, fmt.Sprintf("baton-sim-%d-", cfg.Seed))
	if err != nil {
		return nil, fmt.Errorf("sim: data dir: %w", err)
	}
	w.dir = dir
	// The chain key is the same in every run (only the schedule depends on the seed).
	if w.key, err = chainKey(cfg); err != nil {
		return nil, err
	}
	w.sigs = newSignatures(w)
	w.chk = newChecker(w)
	for i := range cfg.Devices {
		id, err := deviceID(i)
		if err != nil {
			return nil, err
		}
		w.ids = append(w.ids, id)
		w.index[raft.ServerAddress(id)] = i
	}
	w.nw = newNetwork(cfg.Seed, cfg.Devices, linkFaults{Delay: time.Millisecond, Jitter: 2 * time.Millisecond})
	for i := range cfg.Devices {
		w.devs = append(w.devs, newDevice(w, i))
	}
	w.skewClocks() // format.go: an atproto run's clocks start apart
	w.acts = makeSchedule(cfg.Seed, cfg.Devices, prof, cfg.Duration, cfg.TTL)
	return w, nil
}

// deviceID is device i's libp2p peer ID, from a fixed ed25519 seed (the same device
// has the same ID in every run).
func deviceID(i int) (string, error) {
	priv, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{byte(i + 1)}, 32)))
	if err != nil {
		return "", err
	}
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

func (w *world) servers() []raft.Server {
	var out []raft.Server
	for _, id := range w.ids {
		out = append(out, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id), Suffrage: raft.Voter})
	}
	return out
}

// keptPerKind bounds the violations of one kind a run keeps (all are counted).
const keptPerKind = 20

// violation records a violation with the recent events. The same kind and detail is
// recorded once.
func (w *world) violation(kind string, dev int, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	w.ev.add(dev, "VIOLATION", "%s: %s", kind, detail)
	w.mu.Lock()
	defer w.mu.Unlock()
	key := kind + "\x00" + detail
	if w.vseen[key] {
		return
	}
	w.vseen[key] = true
	w.vcount[kind]++
	if w.vcount[kind] > keptPerKind {
		return
	}
	w.violations = append(w.violations, Violation{Kind: kind, At: w.ev.now(), Dev: dev, Detail: detail,
		Events: w.ev.recent(eventsInReport)})
}

func (w *world) since() time.Duration { return time.Since(w.start) }

// sleepUntil sleeps until virtual time start+at.
func (w *world) sleepUntil(at time.Duration) {
	if d := at - w.since(); d > 0 {
		time.Sleep(d)
	}
}

func (w *world) run() (res *Result) {
	defer func() {
		if p := recover(); p != nil {
			w.violation(VPanic, -1, "%v\n%s", p, debug.Stack())
			res = w.result()
		}
	}()
	if w.prof.FounderAlone {
		w.monWG.Add(1)
		go w.chk.run()
		if err := w.foundAlone(); err != nil { // faults_timetravel.go
			w.violation(VPanic, -1, "founding the cluster: %v", err)
			w.shutdown()
			return w.result()
		}
	} else {
		for _, d := range w.devs {
			if err := d.start(); err != nil {
				w.violation(VPanic, d.idx, "start: %v", err)
				w.shutdown()
				return w.result()
			}
		}
		w.monWG.Add(1)
		go w.chk.run()
	}
	w.startLoad()
	finished := make(chan struct{})
	defer close(finished)
	go w.watchdog(finished)

	// The fault phase: run the schedule.
	for _, a := range w.acts {
		w.sleepUntil(w.setupEnd + a.At)
		w.opWG.Add(1)
		go func() {
			defer w.opWG.Done()
			w.do(a)
		}()
	}
	w.sleepUntil(w.setupEnd + w.cfg.Duration)

	// Recovery: stop new intents, heal everything, then liveness and convergence.
	w.mu.Lock()
	w.stopLoad = true
	w.mu.Unlock()
	close(w.recovering)
	w.waitActions()
	// After the actions still running: a fault that began before the end of the
	// phase and took a while (a leader cut waiting for commits in flight) counts
	// (seed 340011 of leaders: its two faults were still running, and the run was
	// taken for one without faults, refused_calm).
	w.mu.Lock()
	w.faultFree = sum(w.faults) == 0
	w.mu.Unlock()
	w.healAll()
	w.recover()
	w.shutdown()
	return w.result()
}

func (w *world) result() *Result {
	signed, refused := w.sigs.counts()
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg := w.cfg
	cfg.Logger, cfg.Trace = nil, nil
	r := &Result{Config: cfg, Violations: append([]Violation(nil), w.violations...), Found: copyMap(w.vcount), Faults: copyMap(w.faults),
		Skipped: w.skipped, Net: w.nw.statsCopy(), Commits: w.chk.length(), Ops: w.chk.ops(), Acked: w.chk.acked(),
		Signed: signed, Refused: refused, Failover: w.chk.failover, Virtual: w.since(), SameSeq: copyMap(w.sameSeq)}
	if len(r.Violations) > 0 {
		r.Events = w.ev.recent(ringSize)
	}
	return r
}

// shutdown stops every device (as a crash: nothing is checked after this), the
// monitors and the network, and removes the data directory.
func (w *world) shutdown() {
	w.mu.Lock()
	w.stopLoad = true
	w.mu.Unlock()
	w.loadWG.Wait()
	for _, d := range w.devs {
		d.stop()
	}
	close(w.done)
	w.monWG.Wait()
	w.nw.close()
	for _, d := range w.devs {
		d.clock.StopTimers()
	}
	// Let the timers of goroutines on their way out fire (a nudge's delay, an RPC's
	// timeout): virtual time stops once the run returns.
	time.Sleep(5 * w.cfg.TTL)
	if !w.cfg.Keep {
		_ = os.RemoveAll(w.dir)
	}
}

// watchdogAfter is how much virtual time past the fault phase a run may take before
// the watchdog calls it stuck.
const watchdogAfter = 5 * time.Minute

// watchdog reports a run that does not finish (a wait that never ends) with the
// stacks of the bubble's goroutines, and stops every device so that waits on them
// end.
func (w *world) watchdog(finished <-chan struct{}) {
	t := time.NewTimer(w.cfg.Duration + watchdogAfter)
	defer t.Stop()
	select {
	case <-finished:
		return
	case <-t.C:
	}
	w.violation(VLeak, -1, "the run did not finish %v after the faults stopped:\n%s", watchdogAfter, bubbleStacks())
	for _, d := range w.devs {
		go d.stop()
	}
}

// rngFor returns a generator for choices made while running action a.
func rngFor(a action) *rand.Rand { return rand.New(rand.NewPCG(a.Seed, uint64(a.ID))) }

func copyMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
