package intentlog

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkApplyOneClient measures the apply of one client's intent as baton bench's
// one-client load makes it: an intents entry of one intent, then the commit that signs
// it, each its own bbolt transaction (each its own Raft batch), on a store that already
// remembers 50,000 intents. writes/intent is bbolt's page writes (one pwrite each).
func BenchmarkApplyOneClient(b *testing.B) {
	h := newHarness(b)
	held(h)
	value := []byte(strings.Repeat("v", 200))
	n := 0
	one := func() {
		n++
		id := fmt.Sprintf("c0-%d", n)
		h.mustAccept(IntentsEntry{Intents: []Intent{{ID: id, Op: OpPut, Path: "bench/" + id, Value: value}}})
		if res, _ := h.commitPending(1); !res.Accepted {
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
	b.ReportMetric(float64(d.TxStats.GetPageCount())/float64(b.N), "pages/intent")
}
