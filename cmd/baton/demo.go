package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

const demoUsage = `Usage: baton demo [--ttl D] [--tick D] [--rate N] [--keep] [--verbose]

Runs three devices in this process, in a temporary directory, over real libp2p on
127.0.0.1 (real Raft, bbolt and ed25519), with a short lease TTL. It submits intents
continuously, prints who holds the lease and the chain head as they change, kills the
holder (a crash: no release), shows the takeover and the chain continuing from the same
head, restarts the killed device and watches it catch up, hands the lease back to it,
then checks everything: all devices hold the same chain, it verifies, every
acknowledged intent is in it exactly once, and no commit was signed twice. Finishes in
well under a minute; exit status 1 if any check failed.

Examples:
  baton demo
  go run ./cmd/baton demo --ttl 1s --tick 100ms
`

// demo is the story told on a testnet.Cluster.
type demo struct {
	out   *demoPrinter // the timestamped lines, in event order
	w     io.Writer    // the header and the summary
	start time.Time
	c     *testnet.Cluster
	ttl   time.Duration
	tick  time.Duration
}

// say tells what happens now.
func (d *demo) say(format string, args ...any) { d.out.at(time.Now(), format, args...) }

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
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	start := time.Now()
	// A line waits up to 250 ms for earlier events told late (the hold callback runs
	// after a timeline sample, every 20 ms).
	d := &demo{out: newDemoPrinter(c.stdout, start, 250*time.Millisecond), w: c.stdout, start: start, ttl: *ttl, tick: *tick}
	defer d.out.Close()
	d.c, err = testnet.NewCluster(testnet.Config{Nodes: 3, TTL: *ttl, Tick: *tick, Dir: dir, Logger: logger,
		OnEvent: func(e testnet.Event) {
			verb, rest, _ := strings.Cut(e.Label, " ")
			d.out.at(e.At, "%s %s", strings.ToUpper(verb), rest)
		},
		OnHold: func(x *testnet.Device, epoch uint64) { d.say("LEASE %s holds epoch %d", x.Label(), epoch) }})
	if err != nil {
		return err
	}
	defer d.c.Close()
	// The whole demo is bounded: it must end in under a minute whatever happens.
	ctx, cancel := context.WithTimeout(ctx, 55*time.Second)
	defer cancel()
	problems, err := d.run(ctx, *rate)
	if err != nil {
		problems = append(problems, err.Error())
	}
	d.out.Close()
	if len(problems) > 0 {
		fmt.Fprintf(c.stdout, "\nFAILED: %d problem(s):\n", len(problems))
		for _, p := range problems {
			fmt.Fprintf(c.stdout, "  - %s\n", p)
		}
		return &exitError{code: 1, msg: "demo failed"}
	}
	fmt.Fprintf(c.stdout, "\nOK: no fork, nothing lost, every device agrees.\n")
	return nil
}

// run tells the story and returns the checks that failed; err means it could not go on.
func (d *demo) run(ctx context.Context, rate int) (problems []string, err error) {
	c := d.c
	fmt.Fprintf(d.w, "baton demo: 3 devices on 127.0.0.1, lease TTL %s, tick %s, %d intents/s\nchain %s\n\n", d.ttl, d.tick, rate, c.Chain())
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var joined []string
	for _, x := range c.Devices()[1:] {
		joined = append(joined, x.Label())
	}
	d.say("cluster up: %s bootstrapped it, %s joined with invite tokens", c.Devices()[0].Label(), strings.Join(joined, " and "))
	// Intents flow: ids are idempotency keys, so a submission with an unknown outcome
	// is retried with the same id on another device.
	load, err := testnet.StartLoad(ctx, testnet.LoadConfig{Targets: c.LoadTargets(), Rate: rate, Max: 1 << 30, Workers: 16,
		Timeout: 3 * time.Second, Retries: 20, Prefix: "demo"})
	if err != nil {
		return nil, err
	}
	defer load.Stop()
	stopHeads := d.heads()
	defer stopHeads()

	// 1. A holder signs while intents flow.
	holder, epoch, err := d.wait(ctx, 10*time.Second, func() (*testnet.Device, uint64, bool) {
		h, ep, ok := c.Holder()
		return h, ep, ok && c.MaxSeq() >= 20
	})
	if err != nil {
		return nil, fmt.Errorf("no holder signing: %w", err)
	}
	d.pace(ctx, time.Second) // a demo to watch

	// 2. Kill it: no release, no goodbye.
	before, _ := c.State(holder)
	killAt := time.Now()
	if err := c.Kill(holder); err != nil {
		return nil, err
	}
	d.say("the killed holder had applied up to seq %d (%s); commits it had in flight may still land", before.Head.Seq, short(before.Head.Hash))
	wctx, cancel := context.WithTimeout(ctx, 4*d.ttl+10*time.Second)
	next, ep2, err := c.WaitHolder(wctx, epoch, holder)
	claimed := time.Since(killAt)
	if err == nil {
		err = wait.Until(wctx, "a commit in the new epoch", func() bool { st, ok := c.State(next); return ok && st.Head.Epoch >= ep2 })
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("no takeover: %w", err)
	}
	takeover := time.Since(killAt)
	if t, ok := c.FirstCommit(ep2); ok && t.Before(killAt.Add(takeover)) {
		takeover = t.Sub(killAt)
	}
	d.say("TAKEOVER by %s at epoch %d: lease claimed %s and first commit %s after the kill (TTL %s)",
		next.Label(), ep2, claimed.Round(time.Millisecond), takeover.Round(time.Millisecond), d.ttl)
	if last := lastOfEpoch(ctx, next, epoch, before.Head.Seq); last > before.Head.Seq {
		d.say("the killed holder's commits in flight landed up to seq %d; epoch %d continues from there", last, ep2)
	}
	if bound := d.ttl + d.tick + 2*testnet.FastRaftTimeout; takeover > bound {
		problems = append(problems, fmt.Sprintf("takeover took %s, more than TTL + tick + one election (%s)", takeover.Round(time.Millisecond), bound))
	}

	// 3. The killed device comes back and catches up.
	if err := c.Restart(ctx, holder); err != nil {
		return problems, err
	}
	restarted := time.Now()
	wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	err = c.WaitSeq(wctx, holder, c.MaxSeq())
	cancel()
	if err != nil {
		return problems, err
	}
	st, _ := c.State(holder)
	d.say("CAUGHT UP: %s is at seq %d %s after its restart, a standby again", holder.Label(), st.Head.Seq, time.Since(restarted).Round(time.Millisecond))
	d.pace(ctx, time.Second)

	// 4. A graceful handover back to it: one Raft entry, no TTL to wait. A transfer
	// asked of a device whose hold moved on meanwhile is refused, never applied
	// halfway: as any client would, look at the lease again and retry. (The holder's
	// own renewal landing first is retried inside the lease.)
	var cur, to *testnet.Device
	var ep3 uint64
	var at time.Time
	for attempt := 1; ; attempt++ {
		if cur, ep3, err = c.WaitHolder(ctx, 0); err != nil {
			return problems, err
		}
		to = holder
		if cur == holder { // it won the lease back meanwhile: hand it on instead
			to = next
		}
		at = time.Now()
		err = c.Transfer(ctx, cur, to)
		if err == nil {
			break
		}
		if attempt == 5 || !errors.Is(err, election.ErrNotHolder) {
			return problems, err
		}
		d.say("transfer refused (%v); looking at the lease again", err)
		d.pace(ctx, 100*time.Millisecond)
	}
	wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	var signedAt uint64
	err = wait.Until(wctx, "a commit by "+to.Label(), func() bool {
		st, ok := c.State(to)
		if ok && st.Head.Epoch > ep3 && st.Head.Signer == st.ID {
			signedAt = st.Head.Epoch
			return true
		}
		return false
	})
	cancel()
	if err != nil {
		return problems, err
	}
	handover := time.Since(at)
	// Two epochs per transfer: the transfer's (ep3+1) fences the giver, and the taker
	// signs only under an epoch it claimed itself (election/DESIGN.md).
	d.say("HANDOVER done: %s signs at epoch %d, %s after the transfer (the transfer wrote epoch %d, which fences %s; %s claimed the next before signing)",
		to.Label(), signedAt, handover.Round(time.Millisecond), ep3+1, cur.Label(), to.Label())
	d.pace(ctx, time.Second)

	// 5. Stop submitting, let the chain settle, check every chain and Raft log.
	load.Stop()
	stopHeads()
	cnt := load.Counts()
	d.say("submissions stopped: %d acknowledged (%d resubmitted after an unknown outcome)", cnt.Acked, cnt.Retried)
	wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	err = c.WaitConverged(wctx, 1)
	cancel()
	if err != nil {
		return problems, err
	}
	d.say("settled: every device at the same head, nothing pending")
	d.out.Flush()
	in, err := c.Collect(context.WithoutCancel(ctx))
	if err != nil {
		return problems, err
	}
	in.Acked = load.Acks()
	res := testnet.Check(in)
	for _, f := range res.Findings {
		if f.Known == "" {
			problems = append(problems, f.String())
		}
	}
	d.summary(res, in, before, claimed, takeover, handover)
	return problems, nil
}

// heads prints the chain head about once a second while the story runs, until the
// returned stop is called.
func (d *demo) heads() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		var last uint64
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			var best node.State
			for _, x := range d.c.Devices() {
				if st, ok := d.c.State(x); ok && st.Head.Seq >= best.Head.Seq {
					best = st
				}
			}
			if best.Head.Seq == 0 || best.Head.Seq == last {
				continue
			}
			d.say("head seq %-5d %s  epoch %d  signed by %s  (%d pending)", best.Head.Seq, short(best.Head.Hash), best.Head.Epoch,
				d.label(best.Head.Signer), best.Pending)
			last = best.Head.Seq
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// label names a peer ID as the device it is.
func (d *demo) label(id string) string {
	for _, x := range d.c.Devices() {
		if x.ID() == id {
			return x.Label()
		}
	}
	return id
}

// wait polls cond until it holds (another device's state changes with no event
// here), bounded by timeout.
func (d *demo) wait(ctx context.Context, timeout time.Duration, cond func() (*testnet.Device, uint64, bool)) (*testnet.Device, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var x *testnet.Device
	var ep uint64
	err := wait.Until(ctx, "the condition", func() bool {
		var ok bool
		x, ep, ok = cond()
		return ok
	})
	return x, ep, err
}

// pace waits dur (or until ctx ends): pacing for the audience, never a synchronisation.
func (d *demo) pace(ctx context.Context, dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// summary prints what the checker found and the story's timings.
func (d *demo) summary(res testnet.CheckResult, in testnet.CheckInput, killed node.State, claimed, takeover, handover time.Duration) {
	d.out.Close() // the summary follows every line told
	w := d.w
	yes := func(ok bool, y string) string {
		if ok {
			return y
		}
		return "NO"
	}
	heads := map[uint64]bool{}
	for _, h := range res.Heads {
		heads[h] = true
	}
	fmt.Fprintf(w, "\nSummary\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  commits\t%d (seq 1..%d), %d failover(s)\n", res.Commits, res.Commits, len(res.Failovers))
	fmt.Fprintf(tw, "  intents acknowledged\t%d, in the chain exactly once: %d, lost %d, duplicates %d\n", res.Acked, res.Acked-res.Lost, res.Lost, res.Dupes)
	fmt.Fprintf(tw, "  intents in the chain\t%d (unacknowledged ones that still landed: %d)\n", res.Intents, res.Intents-(res.Acked-res.Lost))
	fmt.Fprintf(tw, "  signed commits in the raft logs\t%d: %d applied, %d refused by the apply, %d seq signed twice (equivocations)\n",
		res.Signed, res.Signed-res.Refused, res.Refused, res.Equivocations)
	fmt.Fprintf(tw, "  apply rejections\t%s\n", rejections(in.Rejections))
	if len(in.Rejections) > 0 {
		// Without this line the counts read as failures; they are the fence working.
		fmt.Fprintf(tw, "  \t(expected: stale_rev is a lease write that lost its compare-and-set to a newer one, epoch/holder reasons fence a former holder; none changed the chain)\n")
	}
	fmt.Fprintf(tw, "  killed holder\t%s at epoch %d, head seq %d\n", d.label(killed.ID), killed.Lease.Epoch, killed.Head.Seq)
	fmt.Fprintf(tw, "  lease claimed after\t%s (TTL %s, tick %s)\n", claimed.Round(time.Millisecond), d.ttl, d.tick)
	fmt.Fprintf(tw, "  first new commit after\t%s (bound: TTL + tick + Raft election)\n", takeover.Round(time.Millisecond))
	fmt.Fprintf(tw, "  graceful handover\t%s (transfer to first commit)\n", handover.Round(time.Millisecond))
	fmt.Fprintf(tw, "  devices agree\t%s (%d devices, head seq %d)\n", yes(res.Forks == 0 && len(heads) == 1, "yes"), len(res.Heads), res.Commits)
	fmt.Fprintf(tw, "  chain verifies\t%s\n", yes(res.Invalid == 0, "yes on every device (signatures, hash links, seq, epochs)"))
	fmt.Fprintf(tw, "  total time\t%s\n", time.Since(d.start).Round(time.Millisecond))
	tw.Flush()
	known := map[string][]testnet.Finding{}
	for _, f := range res.Findings {
		if f.Known != "" {
			known[f.Known+": "+f.Kind] = append(known[f.Known+": "+f.Kind], f)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(known)) {
		f := known[k][0]
		fmt.Fprintf(w, "  known %s ×%d, e.g. seq %d by %s (not a failure of this demo)\n", k, len(known[k]), f.Seq, f.Device)
	}
}

func rejections(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// shortPeer is the end of a peer ID ("…" and its last six characters), as testnet
// labels devices; status and tail print it too.
func shortPeer(id string) string {
	if len(id) > 10 {
		return "…" + id[len(id)-6:]
	}
	return id
}

// lastOfEpoch is the last seq of epoch in dev's applied chain, reading from seq from
// (from if none follows it).
func lastOfEpoch(ctx context.Context, dev *testnet.Device, epoch, from uint64) uint64 {
	n := dev.Node()
	if n == nil {
		return from
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	last := from
	for ac := range n.Commits(ctx, from+1, false) {
		if ac.Err != nil || ac.Epoch != epoch {
			break
		}
		last = ac.Seq
	}
	return last
}
