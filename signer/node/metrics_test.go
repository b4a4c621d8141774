package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// TestMetricsOneScrapeOneState scrapes a node while its lease is released and claimed
// again, over and over: in every scrape, baton_lease_held 1 comes with a
// baton_lease_holder series for this device, and a scrape without a holder series
// shows the lease free. The gauges of one scrape read one state (the registry runs its
// collectors concurrently; a gauge read apart from the others can show a hold with no
// holder, which is how TestMetricsAddrAndDeploy once failed in CI).
func TestMetricsOneScrapeOneState(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 1))
	cfg.Bootstrap = true
	n := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testutil.WaitFor(t, 10*time.Second, "the lease", n.Holds)

	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	scrapes := 0
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				mfs, err := n.Registry().Gather()
				if err != nil {
					t.Error(err)
					return
				}
				held, free, holders := -1.0, -1.0, []string{}
				for _, mf := range mfs {
					for _, m := range mf.GetMetric() {
						switch mf.GetName() {
						case "baton_lease_held":
							held = m.GetGauge().GetValue()
						case "baton_lease_free":
							free = m.GetGauge().GetValue()
						case "baton_lease_holder":
							holders = append(holders, m.GetLabel()[0].GetValue())
						}
					}
				}
				mu.Lock()
				scrapes++
				switch {
				case held == 1 && (len(holders) != 1 || holders[0] != n.ID()):
					bad = append(bad, fmt.Sprintf("held 1 with holder series %v", holders))
				case len(holders) == 0 && free != 1:
					bad = append(bad, "no holder series and the lease not free")
				}
				mu.Unlock()
			}
		})
	}
	const cycles = 12
	for i := range cycles {
		if err := n.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		testutil.WaitFor(t, 10*time.Second, "the lease again", n.Holds)
	}
	close(done)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d of %d scrapes disagreed with themselves over %d release-claim cycles; first: %s", len(bad), scrapes, cycles, bad[0])
	}
	t.Logf("%d scrapes over %d release-claim cycles", scrapes, cycles)
}
