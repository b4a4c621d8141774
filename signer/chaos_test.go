package signer

import (
	"context"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// devLog is one device's handle on the shared memLog; while cut, its proposals fail
// (outcome unknown) as on a device partitioned from the Raft leader.
type devLog struct {
	*memLog
	cut *atomic.Bool
}

func (d devLog) Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error) {
	if d.cut.Load() {
		return intentlog.Result{}, intentlog.ErrTimeout
	}
	return d.memLog.Propose(ctx, e)
}

type chaosDev struct {
	id     string
	cut    atomic.Bool
	loop   *Loop
	cancel context.CancelFunc
	done   chan error
}

// TestLoopChaos runs three devices (real election.Lease, real Loop) over one in-memory
// apply on a shared ManualClock, through seeded random submissions, clock advances,
// graceful stops, crashes (stops whose release cannot be written), restarts and
// partitions; then heals everything and checks that every accepted intent was signed
// exactly once and the chain verifies.
func TestLoopChaos(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runChaos(t, seed, 60) })
	}
}

func runChaos(t *testing.T, seed int64, steps int) {
	rng := rand.New(rand.NewSource(seed))
	key := testKey(t, 0)
	clock := election.NewManualClock(time.Unix(1_750_000_000, 0))
	m := newMemLog(key.DID())
	devs := make([]*chaosDev, 3)
	start := func(d *chaosDev) {
		dl := devLog{memLog: m, cut: &d.cut}
		ls, err := election.New(dl, d.id, clock, election.Options{TTL: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLoop(LoopConfig{Self: d.id, Key: key, Lease: ls, Log: dl, Clock: clock, Tick: time.Second,
			CallTimeout: 500 * time.Millisecond, MaxBatchCount: 1 + rng.Intn(4), Logger: testLogger(t).With("dev", d.id)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		d.loop, d.cancel, d.done = l, cancel, make(chan error, 1)
		go func() { d.done <- l.Run(ctx) }()
		waitFor(t, d.id+" started", func() bool { return l.Stats().Ticks >= 1 && l.Stats().Steps >= 1 })
	}
	stop := func(d *chaosDev) {
		if d.cancel == nil {
			return
		}
		d.cancel()
		<-d.done // a crashed device's release fails: Run reports it, which is expected
		d.cancel = nil
	}
	for i := range devs {
		devs[i] = &chaosDev{id: fmt.Sprintf("12D3KooWchaos%d", i)}
		start(devs[i])
	}
	defer func() {
		for _, d := range devs {
			stop(d)
		}
	}()
	settle := func() {
		for _, d := range devs {
			if d.cancel != nil {
				waitFor(t, d.id+" parked", func() bool { return d.loop.parked.Load() == 2 })
			}
		}
	}

	var accepted []string
	next := 0
	for range steps {
		switch r := rng.Intn(10); {
		case r < 4: // submit
			n := 1 + rng.Intn(4)
			res, err := m.Propose(context.Background(), intentlog.IntentsEntry{Intents: intents(next, n)})
			next += n
			if err != nil {
				t.Fatal(err)
			}
			for _, ir := range res.Intents {
				if ir.Accepted {
					accepted = append(accepted, ir.ID)
				}
			}
		case r < 7: // time passes
			settle()
			clock.Advance(time.Duration(rng.Intn(3000)) * time.Millisecond)
		case r < 8: // graceful stop or restart
			d := devs[rng.Intn(len(devs))]
			if d.cancel != nil {
				stop(d)
			} else {
				d.cut.Store(false)
				start(d)
			}
		case r < 9: // crash: cut first, so the release on stop cannot be written
			d := devs[rng.Intn(len(devs))]
			d.cut.Store(true)
			stop(d)
		default: // partition or heal
			d := devs[rng.Intn(len(devs))]
			d.cut.Store(!d.cut.Load())
		}
	}

	// Heal: everyone up and connected; time passes until everything is signed.
	for _, d := range devs {
		d.cut.Store(false)
		if d.cancel == nil {
			start(d)
		}
	}
	for i := 0; m.View().Pending > 0; i++ {
		if i > 400 {
			t.Fatalf("still %d intents pending after healing (head %+v, lease %+v)", m.View().Pending, m.View().Head, m.View().Lease)
		}
		settle()
		clock.Advance(500 * time.Millisecond)
	}
	raws := m.chainCopy()
	if err := chain.VerifyChain(raws, key.DID()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	signers, epochs := map[string]bool{}, map[uint64]bool{}
	for _, r := range raws {
		c, _ := chain.Decode(r)
		signers[c.Signer], epochs[c.Epoch] = true, true
		for _, op := range c.Ops {
			seen[op.ID]++
		}
	}
	for _, id := range accepted {
		if seen[id] != 1 {
			t.Fatalf("intent %s signed %d times", id, seen[id])
		}
	}
	if len(seen) != len(accepted) {
		t.Fatalf("%d intents signed, %d accepted", len(seen), len(accepted))
	}
	t.Logf("%d intents, %d commits, %d signers, %d epochs, %d lease epochs, %d rejected commits",
		len(accepted), len(raws), len(signers), len(epochs), m.View().Lease.Epoch, m.rejectedCommits())
}
