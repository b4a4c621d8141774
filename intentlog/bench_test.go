package intentlog

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIntentThroughput3Nodes measures accepted intents per second through a
// 3-node cluster (in-memory transport, real raft-boltdb and bbolt files with fsync),
// with concurrent proposers on the leader: one intent per entry, and group commit of
// 16 intents per entry. Values are 200 bytes.
func BenchmarkIntentThroughput3Nodes(b *testing.B) {
	for _, perEntry := range []int{1, 16} {
		b.Run(fmt.Sprintf("intents_per_entry=%d", perEntry), func(b *testing.B) {
			// Raft's default timeouts, as in production: the tests' short ones let a
			// loaded 2-core machine flap leadership in the middle of a run.
			c := newCluster(b, 3, func(cfg *Config) { cfg.Raft = nil })
			ld := c.leader().log
			value := []byte(strings.Repeat("v", 200))
			var seq atomic.Uint64
			b.SetParallelism(16) // 16 proposers per GOMAXPROCS
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ins := make([]Intent, perEntry)
				for pb.Next() {
					for i := range ins {
						n := seq.Add(1)
						ins[i] = Intent{ID: fmt.Sprintf("bench-%d", n), Op: OpPut,
							Path: fmt.Sprintf("bench/%d", n), Value: value}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					res, err := ld.Propose(ctx, IntentsEntry{Intents: ins})
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
					if !res.Accepted {
						b.Errorf("rejected: %s", res.Reason)
						return
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(seq.Load())/elapsed.Seconds(), "intents/s")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
		})
	}
}
