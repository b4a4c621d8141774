package intentlog

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

// BenchmarkFSMApply measures the apply alone (no Raft): batches of 64 entries of 16
// intents each (200-byte values) per bbolt transaction, with fsync on, and a signed
// commit of everything pending after every batch.
func BenchmarkFSMApply(b *testing.B) {
	f, err := NewFSM(b.TempDir(), testVerify)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := &harness{t: b, f: f}
	held(h)
	value := []byte(strings.Repeat("v", 200))
	const entries, perEntry = 64, 16
	var n int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		logs := make([]*raft.Log, entries)
		for j := range logs {
			ins := make([]Intent, perEntry)
			for k := range ins {
				n++
				ins[k] = Intent{ID: fmt.Sprintf("b-%d", n), Op: OpPut, Path: fmt.Sprintf("bench/%d", n), Value: value}
			}
			data, _ := Encode(IntentsEntry{Intents: ins})
			h.idx++
			logs[j] = &raft.Log{Index: h.idx, Type: raft.LogCommand, Data: data}
		}
		f.ApplyBatch(logs)
		if res, _ := h.commitPending(entries * perEntry); !res.Accepted {
			b.Fatalf("commit rejected: %s", res.Reason)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "intents/s")
}
