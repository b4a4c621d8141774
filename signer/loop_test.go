package signer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

const self = "12D3KooWself"

type harness struct {
	t      *testing.T
	key    *chain.Ed25519Key
	log    *memLog
	lease  *fakeLease
	clock  *election.ManualClock
	loop   *Loop
	cancel context.CancelFunc
	done   chan error
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newHarness(t *testing.T, mod func(*LoopConfig)) *harness {
	t.Helper()
	h := &harness{t: t, key: testKey(t, 0), clock: election.NewManualClock(time.Unix(1_750_000_000, 0))}
	h.log = newMemLog(h.key.DID())
	h.lease = &fakeLease{log: h.log, self: self}
	cfg := LoopConfig{Self: self, Key: h.key, Lease: h.lease, Log: h.log, Clock: h.clock, Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	l, err := NewLoop(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.loop = l
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.loop.Run(ctx) }()
	h.t.Cleanup(func() { _ = h.stop() })
	// Settled: the first lease tick and the first signer step have run.
	h.waitSteps(1)
	waitFor(h.t, "first lease tick", func() bool { return h.loop.Stats().Ticks >= 1 })
}

func (h *harness) stop() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return after cancel")
		return nil
	}
}

// waitSteps waits until the signer has evaluated the state at least n times in all.
func (h *harness) waitSteps(n uint64) {
	h.t.Helper()
	waitFor(h.t, fmt.Sprintf("%d signer steps", n), func() bool { return h.loop.Stats().Steps >= n })
}

// tick advances the clock by one Tick and waits until both goroutines have run after it.
func (h *harness) tick() {
	h.t.Helper()
	parked(h.t, h.loop)
	st := h.loop.Stats()
	h.clock.Advance(h.loop.cfg.Tick)
	waitFor(h.t, "lease tick", func() bool { return h.loop.Stats().Ticks > st.Ticks })
	waitFor(h.t, "signer step", func() bool { return h.loop.Stats().Steps > st.Steps })
}

// parked waits until both of l's goroutines wait with their timers armed.
func parked(t *testing.T, loops ...*Loop) {
	t.Helper()
	for _, l := range loops {
		waitFor(t, "loop parked", func() bool { return l.parked.Load() == 2 })
	}
}

func intents(from, n int) []intentlog.Intent {
	out := make([]intentlog.Intent, n)
	for i := range out {
		k := from + i
		out[i] = intentlog.Intent{ID: fmt.Sprintf("intent-%03d", k), Op: intentlog.OpPut, Path: fmt.Sprintf("app.test/%d", k), Value: []byte(fmt.Sprintf("v%d", k))}
	}
	return out
}

// checkChain verifies the memLog's chain and that it holds exactly the intents
// intent-000 .. intent-(n-1), once each, in order.
func checkChain(t *testing.T, key chain.Key, m *memLog, n int) []chain.Commit {
	t.Helper()
	raws := m.chainCopy()
	if err := chain.VerifyChain(raws, key.DID()); err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	var cs []chain.Commit
	k := 0
	for _, r := range raws {
		c, err := chain.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range c.Ops {
			if want := fmt.Sprintf("intent-%03d", k); op.ID != want {
				t.Fatalf("commit %d: op %s, want %s", c.Seq, op.ID, want)
			}
			k++
		}
		cs = append(cs, c)
	}
	if k != n {
		t.Fatalf("chain holds %d intents, want %d", k, n)
	}
	return cs
}

func TestLoopSignsWhenIntentsArriveNotOnTick(t *testing.T) {
	h := newHarness(t, func(c *LoopConfig) { c.MaxBatchCount = 3 })
	h.lease.grant(t, 1)
	h.start()
	mono := h.clock.Mono()
	if n := h.log.commitProposals(); n != 0 {
		t.Fatalf("%d commits proposed with nothing pending", n)
	}
	total := 0
	for _, n := range []int{1, 2, 3, 4} {
		h.log.submit(t, intents(total, n)...)
		total += n
	}
	waitFor(t, "all intents signed", func() bool {
		v := h.log.View()
		ok := v.Pending == 0 && v.Head.Seq > 0 && h.loop.Stats().CommitsAccepted == v.Head.Seq
		if !ok && testing.Verbose() {
			t.Logf("view %+v stats %+v", v, h.loop.Stats())
		}
		return ok
	})
	if h.clock.Mono() != mono {
		t.Fatal("clock moved: the test must not depend on ticks")
	}
	cs := checkChain(t, h.key, h.log, total)
	for _, c := range cs {
		if len(c.Ops) > 3 || c.Epoch != 1 || c.Signer != self || c.Chain != h.key.DID() {
			t.Fatalf("commit %d: %d ops, epoch %d, signer %q", c.Seq, len(c.Ops), c.Epoch, c.Signer)
		}
		if want := h.clock.Now().UnixMilli(); c.Time != want {
			t.Fatalf("commit time %d, want the wall clock %d", c.Time, want)
		}
	}
	st := h.loop.Stats()
	if st.CommitsAccepted != uint64(len(cs)) || st.LastSigned != uint64(len(cs)) || st.CommitsRejected != 0 {
		t.Fatalf("stats %+v for %d commits", st, len(cs))
	}
	// Keeps going as more intents arrive.
	h.log.submit(t, intents(total, 5)...)
	total += 5
	waitFor(t, "later intents signed", func() bool { return h.log.View().Pending == 0 })
	checkChain(t, h.key, h.log, total)
}

func TestLoopNonHolderNeverSigns(t *testing.T) {
	h := newHarness(t, nil)
	// Another device holds epoch 1.
	if res := h.log.apply(intentlog.ClaimEntry{Holder: "12D3KooWother", Epoch: 1, TS: 1, TTL: 15000}); !res.Accepted {
		t.Fatal(res)
	}
	h.start()
	h.log.submit(t, intents(0, 3)...)
	for range 5 {
		h.tick()
	}
	if n := h.log.commitProposals(); n != 0 {
		t.Fatalf("a non-holder proposed %d commits", n)
	}

	// The lease says we won epoch 2, but the local replica has not applied the claim
	// yet: still no signing (DESIGN: wait for the own claim to apply).
	h.lease.mu.Lock()
	h.lease.holds, h.lease.epoch = true, 2
	h.lease.mu.Unlock()
	for range 3 {
		h.tick()
	}
	if n := h.log.commitProposals(); n != 0 {
		t.Fatalf("signed before the claim was applied locally: %d commits", n)
	}
	// Once it applies, signing starts at epoch 2.
	if res := h.log.apply(intentlog.ClaimEntry{Holder: self, Epoch: 2, PrevRev: 0, TS: 2, TTL: 15000}); !res.Accepted {
		t.Fatal(res)
	}
	waitFor(t, "signing after the claim applied", func() bool { return h.log.View().Pending == 0 })
	if cs := checkChain(t, h.key, h.log, 3); cs[0].Epoch != 2 {
		t.Fatalf("signed at epoch %d, want 2", cs[0].Epoch)
	}
}

func TestLoopStopsSigningWhenHoldExpires(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	h.start()
	h.log.submit(t, intents(0, 2)...)
	waitFor(t, "signed", func() bool { return h.log.View().Pending == 0 })
	before := h.log.commitProposals()

	// The may-sign window closes (the record still names us: nobody claimed yet).
	h.lease.setHolds(false)
	h.log.submit(t, intents(2, 2)...)
	for range 5 {
		h.tick()
	}
	if n := h.log.commitProposals(); n != before {
		t.Fatalf("%d commits proposed after the hold expired", n-before)
	}
}

// expiringKey closes the lease's window while it signs (a slow remote signer).
type expiringKey struct {
	*chain.Ed25519Key
	lease *fakeLease
	signs atomic.Int32
}

func (k *expiringKey) Sign(msg []byte) ([]byte, error) {
	k.signs.Add(1)
	k.lease.setHolds(false)
	return k.Ed25519Key.Sign(msg)
}

func TestLoopChecksHoldRightBeforeProposing(t *testing.T) {
	var ek *expiringKey
	h := newHarness(t, nil)
	ek = &expiringKey{Ed25519Key: h.key, lease: h.lease}
	h.loop.cfg.Key = ek
	h.lease.grant(t, 1)
	h.start()
	h.log.submit(t, intents(0, 1)...)
	waitFor(t, "a signature", func() bool { return ek.signs.Load() >= 1 })
	h.tick()
	if n := h.log.commitProposals(); n != 0 {
		t.Fatalf("proposed %d commits signed while the hold expired", n)
	}
}

func TestLoopStepsDownOnRejectedEpoch(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	// The leader has applied another device's claim at epoch 2; our replica lags, so
	// the local view (and our lease) still say epoch 1 is ours.
	h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
		if _, ok := e.(intentlog.CommitEntry); !ok {
			return intentlog.Result{}, nil, false
		}
		return intentlog.Result{Index: 99, Reason: intentlog.ReasonEpochMismatch, Lease: intentlog.Lease{Holder: "12D3KooWother", Epoch: 2}}, nil, true
	})
	h.start()
	h.log.submit(t, intents(0, 2)...)
	waitFor(t, "step-down", func() bool { return h.loop.Stats().StepDowns == 1 })
	for i := range 4 {
		h.log.submit(t, intents(2+i, 1)...)
		h.tick()
	}
	if n := h.log.commitProposals(); n != 1 {
		t.Fatalf("%d commit proposals at the refused epoch, want exactly 1 (no retry on a stale epoch)", n)
	}
	// A new hold at a later epoch signs again.
	h.log.setHook(nil)
	h.lease.grant(t, 2)
	h.tick()
	waitFor(t, "signing at epoch 2", func() bool { return h.log.View().Pending == 0 })
	if cs := checkChain(t, h.key, h.log, 6); cs[0].Epoch != 2 {
		t.Fatalf("epoch %d", cs[0].Epoch)
	}
}

// A commit refused by a race on the head is never followed by another commit for its
// (seq, epoch): the loop moves to the next epoch first; a refusal right after a move
// waits for the tick (a persistent refusal cannot flood the log with claims).
func TestLoopRefusalMovesEpochAndBacksOff(t *testing.T) {
	h := newHarness(t, nil)
	h.lease.grant(t, 1)
	var refused atomic.Int32
	h.log.setHook(func(ctx context.Context, e intentlog.Entry) (intentlog.Result, error, bool) {
		if _, ok := e.(intentlog.CommitEntry); ok && refused.Add(1) <= 2 {
			return intentlog.Result{Reason: intentlog.ReasonBadSeq, Head: h.log.View().Head}, nil, true
		}
		return intentlog.Result{}, nil, false
	})
	h.start()
	h.log.submit(t, intents(0, 1)...)
	waitFor(t, "two refusals", func() bool { return h.loop.Stats().CommitsRejected == 2 })
	parked(t, h.loop)
	if n := h.log.commitProposals(); n != 2 || h.log.View().Lease.Epoch != 2 {
		t.Fatalf("%d proposals at epoch %d after two refusals, want 2 at epoch 2 (the second move waits for the tick)",
			n, h.log.View().Lease.Epoch)
	}
	h.tick()
	waitFor(t, "signed after the back-off", func() bool { return h.log.View().Pending == 0 })
	cs := checkChain(t, h.key, h.log, 1)
	if cs[0].Epoch != 3 {
		t.Fatalf("signed under epoch %d, want 3", cs[0].Epoch)
	}
	noEquivocation(t, h.log)
	if st := h.loop.Stats(); st.Bumps != 2 || st.SignedRefused != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLoopWedgedHolderReleases(t *testing.T) {
	h := newHarness(t, nil)
	h.loop.cfg.Key = failKey{did: h.key.DID()}
	h.lease.grant(t, 1) // record TTL 15 s: the wedge timeout
	h.start()
	h.log.submit(t, intents(0, 1)...)
	waitFor(t, "a sign failure", func() bool { return h.loop.Stats().SignErrors >= 1 })
	for range 7 { // 14 s: less than a TTL
		h.tick()
	}
	if _, rel := h.lease.counts(); rel != 0 {
		t.Fatalf("released after %v, before a whole TTL", 7*h.loop.cfg.Tick)
	}
	h.tick() // 16 s
	waitFor(t, "the wedge release", func() bool { _, rel := h.lease.counts(); return rel == 1 })
	if st := h.loop.Stats(); st.WedgeReleases != 1 || st.SignErrors < 7 {
		t.Fatalf("stats %+v", st)
	}
	if v := h.log.View(); v.Lease.Holder != "" || v.Lease.Epoch != 1 {
		t.Fatalf("lease after the wedge release: %+v", v.Lease)
	}
	if n := h.log.commitProposals(); n != 0 {
		t.Fatalf("%d proposals from a key that cannot sign", n)
	}
}

func TestLoopRetriesFailedWedgeRelease(t *testing.T) {
	h := newHarness(t, func(c *LoopConfig) { c.WedgeTimeout = 4 * time.Second })
	h.loop.cfg.Key = failKey{did: h.key.DID()}
	h.lease.grant(t, 1)
	h.lease.failReleases = 1
	h.start()
	h.log.submit(t, intents(0, 1)...)
	for range 3 {
		h.tick()
	}
	waitFor(t, "a failed then a retried release", func() bool { _, rel := h.lease.counts(); return rel >= 1 })
	h.tick()
	waitFor(t, "the retried release", func() bool { _, rel := h.lease.counts(); return rel == 2 })
	if v := h.log.View(); v.Lease.Holder != "" {
		t.Fatalf("still held after the retry: %+v", v.Lease)
	}
	if st := h.loop.Stats(); st.WedgeReleases != 1 {
		t.Fatalf("WedgeReleases %d, want 1 (a retry is the same release)", st.WedgeReleases)
	}
}

func TestLoopGracefulStopReleases(t *testing.T) {
	t.Run("holder", func(t *testing.T) {
		h := newHarness(t, nil)
		h.lease.grant(t, 1)
		h.start()
		if err := h.stop(); err != nil {
			t.Fatal(err)
		}
		if _, rel := h.lease.counts(); rel != 1 {
			t.Fatalf("%d releases on stop, want 1", rel)
		}
		if v := h.log.View(); v.Lease.Holder != "" {
			t.Fatalf("record still names %q", v.Lease.Holder)
		}
	})
	t.Run("non-holder", func(t *testing.T) {
		h := newHarness(t, nil)
		h.start()
		if err := h.stop(); err != nil {
			t.Fatal(err)
		}
		if _, rel := h.lease.counts(); rel != 0 {
			t.Fatalf("a non-holder released %d times", rel)
		}
	})
}

func TestLoopLeaseTickNeverBlocksSigning(t *testing.T) {
	h := newHarness(t, func(c *LoopConfig) { c.Tick, c.CallTimeout = time.Second, 50*time.Millisecond })
	h.lease.grant(t, 1)
	// A deadline in at most CallTimeout from the call. Only the upper bound: a loaded
	// machine may run the tick after its deadline passed (lateness, not a missing
	// bound; before, d <= 0 failed the test).
	type bound struct {
		in  time.Duration
		set bool
	}
	stalled := make(chan bound, 16)
	h.lease.tickFn = func(ctx context.Context) (bool, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			stalled <- bound{}
			return false, errors.New("no deadline")
		}
		stalled <- bound{time.Until(dl), true}
		<-ctx.Done() // a stalled replica: the write never completes
		return true, ctx.Err()
	}
	h.start()
	if d := <-stalled; !d.set || d.in > 50*time.Millisecond {
		t.Fatalf("lease write deadline %+v, want one within CallTimeout (50ms)", d)
	}
	h.log.submit(t, intents(0, 2)...)
	waitFor(t, "signing while the lease write stalls", func() bool { return h.log.View().Pending == 0 })
	waitFor(t, "the stalled tick to time out", func() bool { return h.loop.Stats().TickErrors >= 1 })
}

func TestLoopWithElectionLease(t *testing.T) {
	key := testKey(t, 0)
	clock := election.NewManualClock(time.Unix(1_750_000_000, 0))
	m := newMemLog(key.DID())
	newDevice := func(id string) (*Loop, *election.Lease) {
		ls, err := election.New(m, id, clock, election.Options{TTL: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLoop(LoopConfig{Self: id, Key: key, Lease: ls, Log: m, Clock: clock, Logger: testLogger(t).With("dev", id)})
		if err != nil {
			t.Fatal(err)
		}
		return l, ls
	}
	a, la := newDevice("12D3KooWa")
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	defer stopA()
	waitFor(t, "a claims the vacant lease", func() bool { return la.Holds() })

	b, lb := newDevice("12D3KooWb")
	ctxB, stopB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- b.Run(ctxB) }()
	defer stopB()
	waitFor(t, "b's first tick", func() bool { return b.Stats().Ticks >= 1 })

	m.submit(t, intents(0, 4)...)
	waitFor(t, "a signs", func() bool { return m.View().Pending == 0 })
	if lb.Holds() || b.Stats().CommitsProposed != 0 {
		t.Fatal("b signed while a holds")
	}
	// Renewals keep a's hold across several TTLs.
	for range 20 {
		parked(t, a, b)
		clock.Advance(time.Second)
		waitFor(t, "a holds", func() bool { return la.Holds() })
	}
	if b.Stats().CommitsProposed != 0 || m.View().Lease.Holder != "12D3KooWa" {
		t.Fatal("b took over a live lease")
	}
	// a stops gracefully: it releases; b claims at once (no TTL wait) and signs.
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	// b may have claimed the released lease already (it wakes on the release).
	if v := m.View(); v.Lease.Holder == "12D3KooWa" {
		t.Fatalf("a did not release: %+v", v.Lease)
	}
	m.submit(t, intents(4, 3)...)
	parked(t, b)
	clock.Advance(2 * time.Second) // b's next tick
	waitFor(t, "b signs after a's release", func() bool { return m.View().Pending == 0 })
	cs := checkChain(t, key, m, 7)
	if last := cs[len(cs)-1]; last.Signer != "12D3KooWb" || last.Epoch != 2 {
		t.Fatalf("last commit by %s at epoch %d, want b at 2", last.Signer, last.Epoch)
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
}

func TestNewLoopValidates(t *testing.T) {
	key := testKey(t, 0)
	m := newMemLog(key.DID())
	lease := &fakeLease{log: m, self: self}
	good := LoopConfig{Self: self, Key: key, Lease: lease, Log: m}
	cases := map[string]func(c *LoopConfig){
		"no self":            func(c *LoopConfig) { c.Self = "" },
		"no key":             func(c *LoopConfig) { c.Key = nil },
		"no lease":           func(c *LoopConfig) { c.Lease = nil },
		"no log":             func(c *LoopConfig) { c.Log = nil },
		"bad key did":        func(c *LoopConfig) { c.Key = failKey{did: "did:web:x"} },
		"timeout >= tick":    func(c *LoopConfig) { c.Tick, c.CallTimeout = time.Second, time.Second },
		"negative":           func(c *LoopConfig) { c.MaxBatchCount = -1 },
		"batch over entries": func(c *LoopConfig) { c.MaxBatchBytes = intentlog.MaxEntryBytes },
		"lease of another device": func(c *LoopConfig) {
			ls, err := election.New(m, "12D3KooWother", nil, election.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c.Lease = ls
		},
	}
	for name, mod := range cases {
		c := good
		mod(&c)
		if _, err := NewLoop(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: NewLoop = %v, want ErrBadConfig", name, err)
		}
	}
	l, err := NewLoop(good)
	if err != nil {
		t.Fatal(err)
	}
	if l.cfg.Tick != DefaultTick || l.cfg.CallTimeout >= l.cfg.Tick || l.cfg.MaxBatchCount != DefaultMaxBatchCount {
		t.Fatalf("defaults not applied: %+v", l.cfg)
	}
}

func TestLoopRunTwice(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	if err := h.loop.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
}

// closedWatchLog is a log whose Watch channels are all closed (as a closed
// intentlog.Log's are): the loop must not spin on them.
type closedWatchLog struct{ *memLog }

func (closedWatchLog) Watch() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func TestLoopDoesNotSpinOnClosedWatch(t *testing.T) {
	h := newHarness(t, nil)
	h.loop.cfg.Log = closedWatchLog{h.log}
	h.start()
	before := h.loop.Stats().Steps
	<-time.After(50 * time.Millisecond) // a measurement window, not synchronisation
	if n := h.loop.Stats().Steps - before; n > 5 {
		t.Fatalf("%d signer steps in 50ms on a closed watch: spinning", n)
	}
}

// decidingLease adds the policy's next deadline to a fakeLease.
type decidingLease struct {
	*fakeLease
	clock *election.ManualClock
	in    atomic.Int64 // wake in this many ns from now; 0: due now
}

func (d *decidingLease) Decide() election.Decision {
	mono := d.clock.Mono()
	return election.Decision{Action: election.Hold, Wake: mono + time.Duration(d.in.Load())}
}

func TestLoopLeaseTickWakesAtPolicyDeadline(t *testing.T) {
	var dl *decidingLease
	h := newHarness(t, nil)
	dl = &decidingLease{fakeLease: h.lease, clock: h.clock}
	dl.in.Store(int64(300 * time.Millisecond))
	h.loop.cfg.Lease = dl
	h.start()
	next := func(d time.Duration) {
		t.Helper()
		parked(t, h.loop)
		before := h.loop.Stats().Ticks
		h.clock.Advance(d - time.Millisecond)
		parked(t, h.loop)
		if h.loop.Stats().Ticks != before {
			t.Fatalf("lease tick before the deadline (%v)", d)
		}
		h.clock.Advance(time.Millisecond)
		waitFor(t, "the lease tick at the deadline", func() bool { return h.loop.Stats().Ticks == before+1 })
	}
	next(300 * time.Millisecond) // the policy's deadline, well before the 2 s tick
	dl.in.Store(0)               // due now although RenewOrClaim just ran: retry at Tick/4
	next(300 * time.Millisecond) // (the wait was armed with the 300ms answer)
	next(h.loop.cfg.Tick / 4)
	dl.in.Store(int64(time.Hour)) // far away: the tick bounds it
	next(h.loop.cfg.Tick / 4)
	next(h.loop.cfg.Tick)
}

// A standby claims a released lease on the release's apply, not at its next tick:
// the clock does not move, so only the lease-change wakeup can run its claim.
func TestLoopStandbyClaimsReleasedLeaseAtOnce(t *testing.T) {
	key := testKey(t, 0)
	clock := election.NewManualClock(time.Unix(1_750_000_000, 0))
	m := newMemLog(key.DID())
	start := func(id string) (*election.Lease, context.CancelFunc, chan error) {
		ls, err := election.New(m, id, clock, election.Options{TTL: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLoop(LoopConfig{Self: id, Key: key, Lease: ls, Log: m, Clock: clock, Logger: testLogger(t).With("dev", id)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done, exited := make(chan error, 1), make(chan struct{})
		go func() { done <- l.Run(ctx); close(exited) }()
		// Run logs through t until it returns: the test must not end before it does
		// (CI's -race run of 2026-12-03 14:09 saw b's "lease released" after the end).
		t.Cleanup(func() { cancel(); <-exited })
		waitFor(t, id+" first tick", func() bool { return l.Stats().Ticks >= 1 })
		return ls, cancel, done
	}
	la, stopA, doneA := start("12D3KooWa")
	waitFor(t, "a claims the vacant lease", func() bool { return la.Holds() })
	lb, _, _ := start("12D3KooWb")
	if lb.Holds() {
		t.Fatal("b holds a live lease")
	}
	stopA() // graceful: a releases
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b claims the released lease without a tick", func() bool { return lb.Holds() })
	m.submit(t, intents(0, 2)...)
	waitFor(t, "b signs", func() bool { return m.View().Pending == 0 })
	if v := m.View(); v.Lease.Holder != "12D3KooWb" || v.Head.Epoch != 2 {
		t.Fatalf("lease %+v head epoch %d", v.Lease, v.Head.Epoch)
	}
}
