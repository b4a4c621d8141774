package intentlog

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkApplyOneClient measures the apply of one client's intents, one at a time,
// on a store that already remembers 50,000 IDs:
//
//   - carried: as baton bench's one-client load makes it, the holder's commit carries
//     the intent (one entry, one bbolt transaction per intent);
//   - queued: an intents entry, then the commit that signs it (two transactions: the
//     path of an intent logged while no holder took it).
//
// writes/intent is bbolt's page writes per intent (one pwrite each). The time includes
// the harness's reads (the view, the pending queue).
func BenchmarkApplyOneClient(b *testing.B) {
	value := []byte(strings.Repeat("v", 200))
	for _, shape := range []string{"carried", "queued"} {
		b.Run(shape, func(b *testing.B) {
			h := newHarness(b)
			held(h)
			n := 0
			one := func() {
				n++
				in := Intent{ID: fmt.Sprintf("c0-%d", n), Op: OpPut, Path: fmt.Sprintf("bench/c0-%d", n), Value: value}
				var res Result
				if shape == "carried" {
					res, _ = h.commitOps(int64(1000+n), in)
				} else {
					h.mustAccept(IntentsEntry{Intents: []Intent{in}})
					res, _ = h.commitPending(1)
				}
				if !res.Accepted {
					b.Fatalf("commit rejected: %s", res.Reason)
				}
			}
			for n < 50_000 {
				one()
			}
			before := h.f.db.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				one()
			}
			b.StopTimer()
			after := h.f.db.Stats()
			d := after.Sub(&before)
			b.ReportMetric(float64(d.TxStats.GetWrite())/float64(b.N), "writes/intent")
		})
	}
}
