package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
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
	c, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir(), TTL: 2 * time.Second, Tick: 100 * time.Millisecond, Raft: clusterRaft, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for round := range 5 {
		h, _ := c.WaitHolder(ctx, "")
		if err := waitCommitBy(ctx, c, h); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var subs []*intentlog.Subscription
		for i, n := range c.Nodes {
			s := n.Log().Subscribe()
			subs = append(subs, s)
			go func() {
				for ev := range s.C {
					t.Logf("round %d dev %d (holder %d, leader %d) +%6.1fms %T %+v", round, i, h, c.Leader(), float64(time.Since(start).Microseconds())/1000, ev, short(ev))
				}
			}()
		}
		logger.Info("ROUND START", "round", round)
		d, err := gracefulRound(ctx, c)
		ids := ""
		for i, n := range c.Nodes {
			ids += fmt.Sprintf(" dev%d=%s", i, n.ID()[len(n.ID())-5:])
		}
		t.Logf("round %d: %v %v%s", round, d, err, ids)
		time.Sleep(50 * time.Millisecond) // let the trace drain (diagnostic only)
		for _, s := range subs {
			s.Close()
		}
	}
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
	c, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir(), TTL: 15 * time.Second, Tick: 2 * time.Second, Raft: clusterRaft})
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
