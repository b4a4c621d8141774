package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

const demoUsage = `Usage: baton demo [--ttl D] [--tick D] [--rate N] [--keep] [--verbose]

Runs three devices in this process, in a temporary directory, over real libp2p on
127.0.0.1 (real Raft, bbolt and ed25519), with a short lease TTL. It submits intents
continuously, prints who holds the lease and the chain head as they change, kills the
holder (a crash: no release), shows the takeover and the chain continuing from the same
head, restarts the killed device and watches it catch up, then checks everything: all
devices hold the same chain, it verifies, and every acknowledged intent is in it exactly
once. Finishes in well under a minute; exit status 1 if any check failed.

Examples:
  baton demo
  go run ./cmd/baton demo --ttl 1s --tick 100ms
`

// demoDevice is one of the demo's three devices.
type demoDevice struct {
	name   string
	dir    string
	listen string
	cfg    node.Config
	node   atomic.Pointer[node.Node] // nil while down
}

type demo struct {
	c       *cli
	out     io.Writer
	start   time.Time
	ttl     time.Duration
	tick    time.Duration
	rate    int
	devs    []*demoDevice
	names   map[string]string // peer ID -> A/B/C
	failed  []string
	mu      sync.Mutex // guards out and failed
	acked   sync.Map   // intent ID -> struct{}
	nAcked  atomic.Int64
	nErrors atomic.Int64
	// handover is how long the graceful transfer took (transfer call to first commit).
	handover time.Duration
}

func cmdDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("demo", demoUsage)
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL")
	tick := fs.Duration("tick", 200*time.Millisecond, "signer loop tick")
	rate := fs.Int("rate", 50, "intents submitted per second")
	keep := fs.Bool("keep", false, "keep the temporary directory (prints its path)")
	verbose := fs.Bool("verbose", false, "show the nodes' logs on stderr")
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	if *ttl <= 0 || *tick <= 0 || *tick >= *ttl {
		return usagef("--ttl and --tick must be positive, --tick below --ttl")
	}
	if *rate < 1 || *rate > 5000 {
		return usagef("--rate must be between 1 and 5000")
	}
	dir, err := os.MkdirTemp("", "baton-demo-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintf(c.stdout, "data in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	d := &demo{c: c, out: c.stdout, start: time.Now(), ttl: *ttl, tick: *tick, rate: *rate, names: map[string]string{}}
	// The whole demo is bounded: it must end in under a minute whatever happens.
	ctx, cancel := context.WithTimeout(ctx, 55*time.Second)
	defer cancel()
	err = d.run(ctx, dir, logger)
	d.stopAll()
	if err != nil {
		d.fail("%v", err)
	}
	if len(d.failed) > 0 {
		fmt.Fprintf(d.out, "\nFAILED: %d problem(s):\n", len(d.failed))
		for _, f := range d.failed {
			fmt.Fprintf(d.out, "  - %s\n", f)
		}
		return &exitError{code: 1, msg: "demo failed"}
	}
	fmt.Fprintf(d.out, "\nOK: no fork, nothing lost, every device agrees.\n")
	return nil
}

func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "[%6.2fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.say("FAIL: %s", msg)
	d.mu.Lock()
	d.failed = append(d.failed, msg)
	d.mu.Unlock()
}

func (d *demo) name(id string) string {
	if id == "" {
		return "nobody"
	}
	if n, ok := d.names[id]; ok {
		return n
	}
	return shortPeer(id)
}

func shortPeer(id string) string {
	if len(id) > 10 {
		return "…" + id[len(id)-6:]
	}
	return id
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

func (d *demo) live() []*demoDevice {
	var out []*demoDevice
	for _, dv := range d.devs {
		if dv.node.Load() != nil {
			out = append(out, dv)
		}
	}
	return out
}

func (d *demo) stopAll() {
	// The holder first, alone: its graceful stop releases the lease, which needs a
	// quorum of the others still running.
	for _, dv := range d.devs {
		if n := dv.node.Load(); n != nil && n.Holds() {
			dv.node.Store(nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.Stop(ctx)
			cancel()
		}
	}
	var wg sync.WaitGroup
	for _, dv := range d.devs {
		if n := dv.node.Swap(nil); n != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = n.Stop(ctx)
			}()
		}
	}
	wg.Wait()
}

func (d *demo) run(ctx context.Context, dir string, logger *slog.Logger) error {
	key, err := chain.GenerateKey(nil)
	if err != nil {
		return err
	}
	psk, err := transport.GeneratePSK()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "baton demo: 3 devices on 127.0.0.1, lease TTL %s, tick %s, %d intents/s\n", d.ttl, d.tick, d.rate)
	fmt.Fprintf(d.out, "chain %s\n\n", key.DID())
	if err := d.startCluster(ctx, dir, psk, key, logger); err != nil {
		return err
	}

	// Phase 1: a holder signs while intents flow.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); d.watch(watchCtx) }()
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	bg.Add(1)
	go func() { defer bg.Done(); d.submit(subCtx) }()
	defer bg.Wait()
	defer stopSub()
	defer stopWatch()

	holder, err := d.waitFor(ctx, 10*time.Second, "a holder signing", func(s node.State) bool {
		return s.Lease.Holder != "" && s.Head.Seq >= 20 && s.Head.Epoch == s.Lease.Epoch
	})
	if err != nil {
		return err
	}
	d.pause(ctx, 2*time.Second) // let it sign for a while: this is a demo to watch

	// Phase 2: kill the holder.
	var victim *demoDevice
	for _, dv := range d.devs {
		if n := dv.node.Load(); n != nil && n.ID() == holder.Lease.Holder {
			victim = dv
		}
	}
	if victim == nil {
		return fmt.Errorf("the holder %s is not one of the demo's devices", holder.Lease.Holder)
	}
	vn := victim.node.Swap(nil)
	before := vn.State()
	killAt := time.Now()
	if err := vn.Kill(); err != nil {
		d.fail("kill %s: %v", victim.name, err)
	}
	d.say("KILL %s (the holder, epoch %d, head seq %d %s): no release, no goodbye", victim.name, before.Lease.Epoch, before.Head.Seq, short(before.Head.Hash))

	claimed, err := d.waitFor(ctx, 4*d.ttl+10*time.Second, "a new holder", func(s node.State) bool {
		return s.Lease.Epoch > before.Lease.Epoch && s.Lease.Holder != "" && s.Lease.Holder != vn.ID()
	})
	if err != nil {
		return err
	}
	claimAfter := time.Since(killAt)
	signed, err := d.waitFor(ctx, 4*d.ttl+10*time.Second, "a commit under the new epoch", func(s node.State) bool {
		return s.Head.Epoch > before.Lease.Epoch
	})
	if err != nil {
		return err
	}
	takeover := time.Since(killAt)
	d.say("TAKEOVER by %s at epoch %d: lease claimed %s and first commit %s after the kill (TTL %s)",
		d.name(claimed.Lease.Holder), claimed.Lease.Epoch, claimAfter.Round(time.Millisecond), takeover.Round(time.Millisecond), d.ttl)
	if err := d.checkContinuation(ctx, before, signed); err != nil {
		d.fail("%v", err)
	}
	bound := d.ttl + d.tick + 3*time.Second // TTL + one tick + one Raft election (short timeouts)
	if takeover > bound {
		d.fail("takeover took %s, more than TTL + tick + election (%s)", takeover.Round(time.Millisecond), bound)
	}

	// Phase 3: the killed device comes back and catches up.
	if err := d.restart(ctx, victim, logger); err != nil {
		return err
	}
	target := d.anyLive().State().Head.Seq
	caught := time.Now()
	vs, err := d.waitOn(ctx, victim, 15*time.Second, "catch-up of the restarted device", func(s node.State) bool {
		return s.Head.Seq >= target
	})
	if err != nil {
		return err
	}
	d.say("CAUGHT UP: %s is at seq %d (%s after its restart), a standby again", victim.name, vs.Head.Seq, time.Since(caught).Round(time.Millisecond))
	d.pause(ctx, time.Second)

	// Phase 4: a graceful handover back to the restarted device.
	// Holds is false for a moment around lease writes: poll for the holder.
	cur, err := d.waitFor(ctx, 4*d.ttl, "holder to hand the lease over", func(s node.State) bool {
		return s.Lease.HeldByMe
	})
	if err != nil {
		return err
	}
	var holderNode *node.Node
	for _, dv := range d.live() {
		if n := dv.node.Load(); n != nil && n.ID() == cur.ID {
			holderNode = n
		}
	}
	if holderNode == nil {
		return errors.New("the holder went away before the handover")
	}
	// Hand it to the restarted device (or, if that one won the lease meanwhile, to
	// another one).
	to := victim
	if victim.node.Load().ID() == cur.ID {
		for _, dv := range d.live() {
			if dv != victim {
				to = dv
				break
			}
		}
	}
	d.say("TRANSFER: %s hands the lease to %s (graceful, one Raft entry)", d.name(cur.ID), to.name)
	transferAt := time.Now()
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	err = holderNode.Transfer(tctx, to.node.Load().ID())
	tcancel()
	if err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	hs, err := d.waitOn(ctx, to, 10*time.Second, "a commit by the new holder after the transfer", func(s node.State) bool {
		return s.Head.Epoch > cur.Lease.Epoch && s.Head.Signer == s.ID
	})
	if err != nil {
		return err
	}
	handover := time.Since(transferAt)
	d.say("HANDOVER done: %s signs at epoch %d, %s after the transfer (no TTL wait)", to.name, hs.Head.Epoch, handover.Round(time.Millisecond))
	d.handover = handover
	d.pause(ctx, time.Second)

	// Phase 5: stop submitting, let the chain settle, check.
	stopSub()
	stopWatch()
	bg.Wait()
	d.say("submissions stopped: %d acknowledged, %d errors retried", d.nAcked.Load(), d.nErrors.Load())
	if err := d.settle(ctx); err != nil {
		return err
	}
	// The checks get their own deadline: they must run even if the phases ran long.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	return d.check(cctx, key.DID(), killAt, claimAfter, takeover, before, claimed)
}

func (d *demo) raftTweak(rc *raft.Config) {
	// Short timeouts: the demo runs on one machine; defaults (1 s) are for real networks.
	rc.HeartbeatTimeout = 300 * time.Millisecond
	rc.ElectionTimeout = 300 * time.Millisecond
	rc.LeaderLeaseTimeout = 150 * time.Millisecond
}

func (d *demo) startCluster(ctx context.Context, dir string, psk pnet.PSK, key *chain.Ed25519Key, logger *slog.Logger) error {
	for i, name := range []string{"A", "B", "C"} {
		dv := &demoDevice{name: name, dir: filepath.Join(dir, strings.ToLower(name)), listen: "/ip4/127.0.0.1/tcp/0"}
		dv.cfg = node.Config{DataDir: dv.dir, ListenAddrs: []string{dv.listen}, PSK: psk, ChainKey: key,
			TTL: d.ttl, Tick: d.tick, Logger: logger.With("device", name), Raft: d.raftTweak,
			Bootstrap: i == 0}
		if i > 0 {
			first := d.devs[0].node.Load()
			token, err := newJoinToken()
			if err != nil {
				return err
			}
			first.AllowJoin(token, time.Now().Add(time.Minute))
			dv.cfg.Join = &node.JoinConfig{Seeds: first.Addrs(), Token: token}
		}
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		n, err := node.Start(sctx, dv.cfg)
		cancel()
		if err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		dv.node.Store(n)
		// Restart on the same port: the others remember this device's address.
		if addrs := n.Addrs(); len(addrs) > 0 {
			if p := strings.Index(addrs[0], "/p2p/"); p > 0 {
				dv.listen = addrs[0][:p]
			}
		}
		d.names[n.ID()] = name
		d.devs = append(d.devs, dv)
		how := "bootstrapped the cluster"
		if i > 0 {
			how = "joined through A with an invite token"
		}
		d.say("device %s %s  (peer %s, %s)", name, how, shortPeer(n.ID()), dv.listen)
		if i == 0 {
			if _, err := d.waitFor(ctx, 10*time.Second, "A to lead Raft", func(s node.State) bool { return s.Raft.Role == "Leader" }); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *demo) restart(ctx context.Context, dv *demoDevice, logger *slog.Logger) error {
	cfg := dv.cfg
	cfg.Bootstrap, cfg.Join = false, nil
	cfg.ListenAddrs = []string{dv.listen}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, err := node.Start(sctx, cfg)
	if err != nil {
		return fmt.Errorf("restart %s: %w", dv.name, err)
	}
	dv.node.Store(n)
	s := n.State()
	d.say("RESTART %s from its data dir (head seq %d on disk): it rejoins and catches up", dv.name, s.Head.Seq)
	return nil
}

// pause waits d (or until ctx ends). Only for pacing the show, never to synchronise.
func (d *demo) pause(ctx context.Context, dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// waitOn polls one device's state until ok, or the deadline.
func (d *demo) waitOn(ctx context.Context, dv *demoDevice, timeout time.Duration, what string, ok func(node.State) bool) (node.State, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if n := dv.node.Load(); n != nil {
			if s := n.State(); ok(s) {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return node.State{}, fmt.Errorf("no %s within %s", what, timeout)
		case <-t.C:
		}
	}
}

// waitFor polls the live devices' states until one satisfies ok, or the deadline.
func (d *demo) waitFor(ctx context.Context, timeout time.Duration, what string, ok func(node.State) bool) (node.State, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		for _, dv := range d.live() {
			if n := dv.node.Load(); n != nil {
				if s := n.State(); ok(s) {
					return s, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return node.State{}, fmt.Errorf("no %s within %s", what, timeout)
		case <-t.C:
		}
	}
}

// watch prints lease changes and the head about twice a second.
func (d *demo) watch(ctx context.Context) {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	var epoch uint64
	holder := "?"
	var lastHead time.Time
	var lastSeq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var best node.State
		for _, dv := range d.live() {
			if n := dv.node.Load(); n != nil {
				if s := n.State(); s.Raft.AppliedIndex >= best.Raft.AppliedIndex {
					best = s
				}
			}
		}
		if best.ID == "" {
			continue
		}
		if best.Lease.Epoch != epoch || best.Lease.Holder != holder {
			if best.Lease.Holder == "" {
				d.say("lease released at epoch %d", best.Lease.Epoch)
			} else {
				d.say("LEASE %s holds epoch %d (ttl %s)", d.name(best.Lease.Holder), best.Lease.Epoch, time.Duration(best.Lease.TTLMs)*time.Millisecond)
			}
			epoch, holder = best.Lease.Epoch, best.Lease.Holder
		}
		if best.Head.Seq > lastSeq && time.Since(lastHead) >= 500*time.Millisecond {
			d.say("head seq %-5d %s  epoch %d  signed by %s  (%d pending)", best.Head.Seq, short(best.Head.Hash), best.Head.Epoch, d.name(best.Head.Signer), best.Pending)
			lastHead, lastSeq = time.Now(), best.Head.Seq
		}
	}
}

// submit sends intents at the configured rate through the live devices in turn. An
// intent whose outcome is unknown (an error) is retried with the same ID on another
// device until acknowledged: IDs are idempotency keys.
func (d *demo) submit(ctx context.Context) {
	t := time.NewTicker(time.Second / time.Duration(d.rate))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 16)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			in := intentlog.Intent{ID: fmt.Sprintf("demo-%d", i), Op: intentlog.OpPut,
				Path: fmt.Sprintf("demo/%d", i), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			for try := 0; try < 50 && ctx.Err() == nil; try++ {
				live := d.live()
				if len(live) == 0 {
					return
				}
				n := live[(i+try)%len(live)].node.Load()
				if n == nil {
					continue
				}
				sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := n.Submit(sctx, in, node.WaitCommitted)
				cancel()
				if err == nil {
					d.acked.Store(in.ID, struct{}{})
					d.nAcked.Add(1)
					return
				}
				d.nErrors.Add(1)
			}
		}(i)
	}
}

// checkContinuation checks that the first commit of the new epoch links to the head
// the killed holder left (or to a commit after it that the old epoch completed).
func (d *demo) checkContinuation(ctx context.Context, before, after node.State) error {
	n := d.anyLive()
	if n == nil {
		return errors.New("no live device")
	}
	var prevSeq uint64
	var firstNew signer.AppliedCommit
	for c := range n.Commits(ctx, max(before.Head.Seq, 1), false) {
		if c.Err != nil {
			return c.Err
		}
		if c.Epoch > before.Lease.Epoch {
			firstNew = c
			break
		}
		prevSeq = c.Seq
	}
	if firstNew.Seq == 0 {
		return errors.New("no commit of the new epoch found")
	}
	d.say("CHAIN continues: seq %d (epoch %d, by %s) follows seq %d, the old holder's last commit; no fork",
		firstNew.Seq, firstNew.Epoch, d.name(firstNew.Signer), prevSeq)
	if prevSeq+1 != firstNew.Seq {
		return fmt.Errorf("first commit of the new epoch is seq %d, after seq %d", firstNew.Seq, prevSeq)
	}
	return nil
}

// anyLive returns the live device with the most advanced chain head.
func (d *demo) anyLive() *node.Node {
	var best *node.Node
	var seq uint64
	for _, dv := range d.live() {
		if n := dv.node.Load(); n != nil {
			if s := n.State().Head.Seq; best == nil || s > seq {
				best, seq = n, s
			}
		}
	}
	return best
}

// settle waits until nothing is pending and every device has the same head.
func (d *demo) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var heads []string
		pending := 0
		for _, dv := range d.devs {
			if n := dv.node.Load(); n != nil {
				s := n.State()
				heads = append(heads, fmt.Sprintf("%d/%s", s.Head.Seq, s.Head.Hash))
				pending += s.Pending
			}
		}
		same := len(heads) == len(d.devs)
		for _, h := range heads {
			same = same && h == heads[0]
		}
		if same && pending == 0 {
			d.say("settled: all %d devices at head %s, nothing pending", len(heads), heads[0][:min(len(heads[0]), 20)])
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devices did not converge within 15s (heads %v, %d pending)", heads, pending)
		case <-t.C:
		}
	}
}

// check verifies the chain on every device and the exactly-once promise, and prints
// the summary.
func (d *demo) check(ctx context.Context, did string, killAt time.Time, claimAfter, takeover time.Duration, before, claimed node.State) error {
	type devChain struct {
		raws   [][]byte
		hashes []string
	}
	chains := make([]devChain, len(d.devs))
	verifies := true
	for i, dv := range d.devs {
		n := dv.node.Load()
		if n == nil {
			return fmt.Errorf("%s is down", dv.name)
		}
		for c := range n.Commits(ctx, 1, false) {
			if c.Err != nil {
				return fmt.Errorf("%s: read commits: %w", dv.name, c.Err)
			}
			chains[i].raws = append(chains[i].raws, c.Raw)
			chains[i].hashes = append(chains[i].hashes, fmt.Sprintf("%x", c.Hash))
		}
		if err := chain.VerifyChain(chains[i].raws, did); err != nil {
			d.fail("%s: chain does not verify: %v", dv.name, err)
			verifies = false
		}
	}
	for i := 1; i < len(chains); i++ {
		if strings.Join(chains[i].hashes, ",") != strings.Join(chains[0].hashes, ",") {
			d.fail("%s and %s hold different chains (%d and %d commits)", d.devs[0].name, d.devs[i].name, len(chains[0].hashes), len(chains[i].hashes))
		}
	}
	seen := map[string]int{}
	signers := map[string]int{}
	epochs := map[uint64]bool{}
	for _, raw := range chains[0].raws {
		c, err := chain.Decode(raw)
		if err != nil {
			return err
		}
		signers[d.name(c.Signer)] += len(c.Ops)
		epochs[c.Epoch] = true
		for _, op := range c.Ops {
			seen[op.ID]++
		}
	}
	var missing, dup int
	d.acked.Range(func(k, _ any) bool {
		if seen[k.(string)] != 1 {
			missing++
		}
		return true
	})
	for id, k := range seen {
		if k > 1 {
			dup++
			if dup <= 3 {
				d.fail("intent %s appears %d times", id, k)
			}
		}
	}
	if missing > 0 {
		d.fail("%d acknowledged intents are not in the chain exactly once", missing)
	}
	n := len(chains[0].raws)
	fmt.Fprintf(d.out, "\nSummary\n")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  commits\t%d (seq 1..%d), epochs used %d\n", n, n, len(epochs))
	fmt.Fprintf(tw, "  intents acknowledged\t%d, in the chain exactly once: %d, duplicates: %d\n", d.nAcked.Load(), int(d.nAcked.Load())-missing, dup)
	fmt.Fprintf(tw, "  intents in the chain\t%d (unacknowledged ones that still landed: %d)\n", len(seen), len(seen)-(int(d.nAcked.Load())-missing))
	var by []string
	for _, dv := range d.devs {
		by = append(by, fmt.Sprintf("%s %d", dv.name, signers[dv.name]))
	}
	fmt.Fprintf(tw, "  ops signed per device\t%s\n", strings.Join(by, ", "))
	fmt.Fprintf(tw, "  killed holder\t%s at epoch %d, head seq %d\n", d.name(before.Lease.Holder), before.Lease.Epoch, before.Head.Seq)
	fmt.Fprintf(tw, "  new holder\t%s at epoch %d\n", d.name(claimed.Lease.Holder), claimed.Lease.Epoch)
	fmt.Fprintf(tw, "  lease claimed after\t%s (TTL %s, tick %s)\n", claimAfter.Round(time.Millisecond), d.ttl, d.tick)
	fmt.Fprintf(tw, "  first new commit after\t%s (bound: TTL + tick + Raft election)\n", takeover.Round(time.Millisecond))
	fmt.Fprintf(tw, "  graceful handover\t%s (transfer to first commit)\n", d.handover.Round(time.Millisecond))
	agree := "yes"
	for i := 1; i < len(chains); i++ {
		if len(chains[i].hashes) != n {
			agree = "NO"
		}
	}
	head := "-"
	if n > 0 {
		head = short(chains[0].hashes[n-1])
	}
	fmt.Fprintf(tw, "  devices agree\t%s (%d devices, head %s)\n", agree, len(chains), head)
	fmt.Fprintf(tw, "  chain verifies\t%s\n", map[bool]string{true: "yes on every device (signatures, hash links, seq, epochs)", false: "NO"}[verifies])
	fmt.Fprintf(tw, "  total time\t%s\n", time.Since(d.start).Round(time.Millisecond))
	tw.Flush()
	_ = killAt
	return nil
}
