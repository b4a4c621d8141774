package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// TestTraceGraceful prints when each device applies the events of a graceful
// handover (BENCH_TRACE=1; a diagnostic, not a check).
func TestTraceGraceful(t *testing.T) {
	if os.Getenv("BENCH_TRACE") == "" {
		t.Skip("diagnostic: BENCH_TRACE=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lf, _ := os.Create(os.Getenv("BENCH_TRACE"))
	defer lf.Close()
	logger := slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := startCluster(ctx, t.TempDir(), 2*time.Second, 100*time.Millisecond, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for round := range 5 {
		h, _, _ := c.WaitHolder(ctx, 0)
		if err := waitCommitBy(ctx, h); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var subs []*intentlog.Subscription
		for _, d := range c.Devices() {
			s := d.Node().Log().Subscribe()
			subs = append(subs, s)
			go func() {
				for ev := range s.C {
					leader := "-"
					if l, ok := c.Leader(); ok {
						leader = l.Name
					}
					t.Logf("round %d %s (holder %s, leader %s) +%6.1fms %T %+v", round, d.Name, h.Name, leader, float64(time.Since(start).Microseconds())/1000, ev, short(ev))
				}
			}()
		}
		logger.Info("ROUND START", "round", round)
		d, err := gracefulRound(ctx, c)
		ids := ""
		for _, x := range c.Devices() {
			ids += " " + x.Label()
		}
		t.Logf("round %d: %v %v%s", round, d, err, ids)
		time.Sleep(50 * time.Millisecond) // let the trace drain (diagnostic only)
		for _, s := range subs {
			s.Close()
		}
	}
}

// TestGracefulRounds runs BENCH_GRACEFUL graceful rounds as the bench's failover
// section does (one TTL between rounds: the device that released stands off) and
// prints their median and quartiles: an A/B of the handover alone, without the crash
// rounds (a diagnostic, not a check; docs/BENCHMARKS.md).
func TestGracefulRounds(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BENCH_GRACEFUL"))
	if n <= 0 {
		t.Skip("diagnostic: BENCH_GRACEFUL=rounds")
	}
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*(ttl+time.Second)+time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir(), ttl, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ms := make([]float64, 0, n)
	for range n {
		d, err := gracefulRound(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, float64(d.Microseconds())/1000)
		if err := sleepCtx(ctx, ttl); err != nil {
			t.Fatal(err)
		}
	}
	sort.Float64s(ms)
	t.Logf("graceful rounds %d: median %.2f ms (p25 %.2f, p75 %.2f, min %.2f, max %.2f)",
		n, ms[n/2], ms[n/4], ms[3*n/4], ms[0], ms[n-1])
}

func short(ev intentlog.Event) string {
	switch e := ev.(type) {
	case intentlog.LeaseChanged:
		return fmt.Sprintf("%+v", e)
	case intentlog.CommitApplied:
		return fmt.Sprintf("%v", e.Head.Seq)
	}
	return ""
}

// TestProfileIdle writes a CPU profile of an idle three-device cluster (BENCH_IDLE_PROFILE=file;
// a diagnostic, not a check).
func TestProfileIdle(t *testing.T) {
	out := os.Getenv("BENCH_IDLE_PROFILE")
	if out == "" {
		t.Skip("diagnostic: BENCH_IDLE_PROFILE=cpu.out")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir(), 15*time.Second, 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := sleepCtx(ctx, 5*time.Second); err != nil { // settle
		t.Fatal(err)
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	_ = sleepCtx(ctx, 20*time.Second) // the idle window being profiled
	pprof.StopCPUProfile()
}

// TestTraceCrashLeader prints, for crash rounds of a holder that leads Raft, when the
// survivors see a new Raft leader and apply each event after the kill
// (BENCH_TRACE_CRASH=log file for the devices' debug log; a diagnostic, not a check).
func TestTraceCrashLeader(t *testing.T) {
	out := os.Getenv("BENCH_TRACE_CRASH")
	if out == "" {
		t.Skip("diagnostic: BENCH_TRACE_CRASH=/tmp/crash.log")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lf, _ := os.Create(out)
	defer lf.Close()
	logger := slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := startCluster(ctx, t.TempDir(), 2*time.Second, 100*time.Millisecond, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for round := range 6 {
		h, err := arrange(ctx, c, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitCommitBy(ctx, h); err != nil {
			t.Fatal(err)
		}
		if err := sleepCtx(ctx, time.Duration(rng.Int64N(int64(c.TTL())))); err != nil {
			t.Fatal(err)
		}
		obs := c.Devices()[(h.Index+1)%3]
		n := h.Node()
		epoch, id := n.Lease().Epoch(), n.ID()
		start := time.Now()
		since := func() string { return fmt.Sprintf("+%7.1fms", float64(time.Since(start).Microseconds())/1000) }
		var subs []*intentlog.Subscription
		stop := make(chan struct{})
		for _, d := range c.Devices() {
			if d == h {
				continue
			}
			s := d.Node().Log().Subscribe()
			subs = append(subs, s)
			go func() {
				for ev := range s.C {
					t.Logf("round %d %s %s %T %s", round, d.Name, since(), ev, short(ev))
				}
			}()
			go func() {
				last := ""
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					if nd := d.Node(); nd != nil {
						_, l := nd.Log().Leader()
						if string(l) != last {
							last = string(l)
							t.Logf("round %d %s %s raft leader now %q", round, d.Name, since(), shortID(last))
						}
					}
				}
			}()
		}
		logger.Info("ROUND KILL", "round", round, "holder", h.Name)
		if err := c.Kill(h); err != nil {
			t.Fatal(err)
		}
		el, who, err := firstCommitAfter(ctx, obs, epoch, id, start)
		t.Logf("round %d: holder %s killed; first commit after %v by %s (%v)", round, h.Name, el, shortID(who), err)
		close(stop)
		time.Sleep(50 * time.Millisecond) // let the trace drain (diagnostic only)
		for _, s := range subs {
			s.Close()
		}
		if err := c.Restart(ctx, h); err != nil {
			t.Fatal(err)
		}
		if err := h.Node().Log().WaitApplied(ctx, obs.Node().Log().View().AppliedIndex); err != nil {
			t.Fatal(err)
		}
	}
}

func shortID(s string) string {
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}
