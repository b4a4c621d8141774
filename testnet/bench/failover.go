package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// rng picks kill times; seeded so that runs are comparable.
var rng = rand.New(rand.NewPCG(7, 7))

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// raftElection is the bound's allowance for one Raft election with the cluster's
// raft settings (see clusterRaft).
var raftElection = time.Second

// firstCommitAfter waits until device obs has applied a commit at an epoch above
// epoch signed by someone other than not, while a helper keeps one intent pending
// through obs (retrying while there is no leader). It returns when that commit was
// seen and who signed it.
func firstCommitAfter(ctx context.Context, obs *testnet.Device, epoch uint64, not string, start time.Time) (time.Duration, string, error) {
	n := obs.Node()
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; sctx.Err() == nil; i++ {
			actx, cancel := context.WithTimeout(sctx, 500*time.Millisecond)
			_, err := submit(actx, obs, fmt.Sprintf("fo%d-%d", runSeq.Add(1), i), []byte("x"), node.WaitCommitted)
			cancel()
			if err == nil {
				// Keep one intent pending, not a flood: wait for the head to move.
				// (Watch fires at every applied entry: waiting for one wakeup sent an
				// intents entry into the log at each claim and refusal of the
				// handover, each a Raft round on the path it measures.)
				waitHeadMoves(sctx, n.Log())
			}
		}
	}()
	defer func() { stop(); wg.Wait() }()
	for {
		w := n.Log().Watch()
		v := n.Log().View()
		if v.Head.Epoch > epoch && v.Head.Seq > 0 {
			el := time.Since(start)
			raw, err := n.Log().Commit(v.Head.Seq)
			who := ""
			if err == nil {
				if cm, err := chain.Decode(raw); err == nil {
					who = cm.Signer
				}
			}
			if who != not {
				return el, who, nil
			}
		}
		select {
		case <-w:
		case <-ctx.Done():
			return 0, "", fmt.Errorf("no commit above epoch %d: %w", epoch, ctx.Err())
		}
	}
}

// waitHeadMoves returns once the chain's head applied on l differs from the one it
// shows now, or ctx ends.
func waitHeadMoves(ctx context.Context, l *intentlog.Log) {
	head := l.View().Head
	for {
		w := l.Watch()
		if h := l.View().Head; h.Seq != head.Seq || h.Epoch != head.Epoch {
			return
		}
		select {
		case <-w:
		case <-ctx.Done():
			return
		}
	}
}

// crashRound kills the holder (arranged to be or not be the Raft leader) and times
// its kill to the first commit by a new holder observed on a survivor, then restarts
// the killed device and waits until it has caught up.
func crashRound(ctx context.Context, c *testnet.Cluster, leader bool) (time.Duration, string, error) {
	h, err := arrange(ctx, c, leader)
	if err != nil {
		return 0, "", err
	}
	// Let the new tenure settle (its first renewal) so every round starts alike.
	if err := waitCommitBy(ctx, h); err != nil {
		return 0, "", err
	}
	// Die at a uniformly random point of the renewal cycle (renewals come every
	// half TTL or so), not right after the tenure began.
	if err := sleepCtx(ctx, time.Duration(rng.Int64N(int64(c.TTL())))); err != nil {
		return 0, "", err
	}
	n := h.Node()
	if n == nil || !n.Holds() {
		return 0, "", errors.New("holder lost the lease while idle")
	}
	obs := c.Devices()[(h.Index+1)%3]
	epoch := n.Lease().Epoch()
	id := n.ID()
	rec := obs.Node().Log().View().Lease
	start := time.Now()
	if err := c.Kill(h); err != nil {
		return 0, "", fmt.Errorf("kill: %w", err)
	}
	stop := make(chan struct{})
	seen := watchFailover(obs, id, rec, start, stop)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	el, _, err := firstCommitAfter(rctx, obs, epoch, id, start)
	cancel()
	close(stop)
	tr := <-seen
	if err != nil {
		return 0, "", err
	}
	note := ""
	if el > c.TTL() {
		note = fmt.Sprintf("a crash round (holder led Raft: %v) took %v: on the observer, a Raft leader other than the holder at %v, "+
			"the dead holder's record changed (its last renewal applied) at %v, the claim applied at %v",
			leader, el.Round(time.Millisecond), fmtAt(tr.leader), fmtAt(tr.renewed), fmtAt(tr.claimed))
	}
	if err := c.Restart(ctx, h); err != nil {
		return el, note, err
	}
	target := obs.Node().Log().View().AppliedIndex
	if err := h.Node().Log().WaitApplied(ctx, target); err != nil {
		return el, note, fmt.Errorf("restarted device catching up: %w", err)
	}
	return el, note, nil
}

// foTrace is what an observer saw after a kill, as times since the kill (0: not seen).
type foTrace struct{ leader, renewed, claimed time.Duration }

func fmtAt(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// watchFailover polls device obs every 2 ms until stop (a diagnostic beside the
// measurement, not part of it): when it first sees a Raft leader other than the dead
// device gone, the lease record rec changed at the same epoch (gone's renewal, in
// flight at the kill, committed by the next leader), and a record at a later epoch.
func watchFailover(obs *testnet.Device, gone string, rec intentlog.Lease, start time.Time, stop <-chan struct{}) <-chan foTrace {
	out := make(chan foTrace, 1)
	go func() {
		var tr foTrace
		defer func() { out <- tr }()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			n := obs.Node()
			if n == nil {
				continue
			}
			at := time.Since(start)
			if _, l := n.Log().Leader(); tr.leader == 0 && l != "" && string(l) != gone {
				tr.leader = at
			}
			v := n.Log().View().Lease
			if tr.renewed == 0 && v.Epoch == rec.Epoch && v.Rev != rec.Rev {
				tr.renewed = at
			}
			if tr.claimed == 0 && v.Epoch > rec.Epoch {
				tr.claimed = at
			}
		}
	}()
	return out
}

// waitCommitBy makes sure device h holds and has signed under its current epoch.
func waitCommitBy(ctx context.Context, h *testnet.Device) error {
	n := h.Node()
	if n == nil {
		return fmt.Errorf("%s is down", h.Label())
	}
	epoch := n.Lease().Epoch()
	if n.Log().View().Head.Epoch >= epoch && epoch > 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := submit(wctx, h, fmt.Sprintf("settle%d", runSeq.Add(1)), []byte("x"), node.WaitSigned)
	return err
}

// gracefulRound releases the lease on the holder and times the release call to the
// first commit at a higher epoch, observed on another device.
func gracefulRound(ctx context.Context, c *testnet.Cluster) (time.Duration, error) {
	h, _, err := c.WaitHolder(ctx, 0)
	if err != nil {
		return 0, err
	}
	if err := waitCommitBy(ctx, h); err != nil {
		return 0, err
	}
	obs := c.Devices()[(h.Index+1)%3]
	epoch := h.Node().Lease().Epoch()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := h.Node().Release(rctx); err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	el, _, err := firstCommitAfter(rctx, obs, epoch, "", start)
	return el, err
}

// runFailover runs o.Rounds crash rounds of each kind and o.Rounds graceful rounds.
func runFailover(ctx context.Context, o Options, c *testnet.Cluster, r *Report) error {
	fo := &FailoverResult{}
	r.Failover = fo
	ttl := o.TTL
	bound := ttl + o.Tick + raftElection
	fo.BoundMs = float64(bound) / 1e6
	var crash, lead, grace []time.Duration
	var lastRelease time.Time
	defer func() {
		fo.Crash, fo.CrashLeader, fo.Graceful = Summarise(crash), Summarise(lead), Summarise(grace)
		fo.CrashTTLx = ratio(fo.Crash.P50Ms, float64(ttl)/1e6)
		fo.LeaderTTLx = ratio(fo.CrashLeader.P50Ms, float64(ttl)/1e6)
		fo.CrashP99x = ratio(fo.Crash.P99Ms, float64(ttl)/1e6)
		fo.LeaderP99x = ratio(fo.CrashLeader.P99Ms, float64(ttl)/1e6)
		for _, d := range append(append([]time.Duration(nil), crash...), lead...) {
			if d > bound {
				fo.OverBound++
			}
		}
	}()
	for i := range o.Rounds {
		for _, leader := range []bool{false, true} {
			d, note, err := crashRound(ctx, c, leader)
			if note != "" {
				fo.Notes = append(fo.Notes, fmt.Sprintf("round %d: %s", i, note))
			}
			if err != nil {
				return fmt.Errorf("crash round %d (leader %v): %w", i, leader, err)
			}
			if leader {
				lead = append(lead, d)
			} else {
				crash = append(crash, d)
			}
			o.progress("failover round %d, holder was leader %v: %v", i, leader, d.Round(time.Millisecond))
		}
		// A device that released stands off for one TTL (it lets the others
		// claim); rounds back to back would find every standby standing off.
		if wait := o.TTL - time.Since(lastRelease); wait > 0 {
			if err := sleepCtx(ctx, wait); err != nil {
				return err
			}
		}
		d, err := gracefulRound(ctx, c)
		lastRelease = time.Now()
		if err != nil {
			return fmt.Errorf("graceful round %d: %w", i, err)
		}
		grace = append(grace, d)
		o.progress("graceful round %d: %v", i, d.Round(100*time.Microsecond))
	}
	return nil
}
