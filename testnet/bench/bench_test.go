package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// Go benchmarks behind `baton bench`, for profiling one path at a time:
//
//	go test ./testnet/bench -run '^$' -bench Submit -benchtime 2000x -cpuprofile cpu.out
//	go tool pprof -top testnet/bench.test cpu.out

func benchCluster(b *testing.B) *testnet.Device {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := startCluster(ctx, b.TempDir(), 2*time.Second, 100*time.Millisecond, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	dev, err := arrange(ctx, c, true)
	if err != nil {
		b.Fatal(err)
	}
	return dev
}

func benchSubmit(b *testing.B, wait node.Wait, parallel int) {
	dev := benchCluster(b)
	value := make([]byte, 200)
	ctx := context.Background()
	b.SetParallelism(parallel)
	b.ResetTimer()
	var n atomicCounter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := submit(ctx, dev, fmt.Sprintf("b%d", n.next()), value, wait); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSubmitAccepted: Node.Submit until the intent is in the Raft log.
func BenchmarkSubmitAccepted(b *testing.B) { benchSubmit(b, node.WaitCommitted, 1) }

// BenchmarkSubmitSigned: Node.Submit until the intent's commit is applied.
func BenchmarkSubmitSigned(b *testing.B) { benchSubmit(b, node.WaitSigned, 1) }

// BenchmarkSubmitSigned64: 64 clients per GOMAXPROCS... (SetParallelism 32 on 2 cores).
func BenchmarkSubmitSigned64(b *testing.B) { benchSubmit(b, node.WaitSigned, 32) }

// BenchmarkBaselineApply: the plain-raft baseline, one writer.
func BenchmarkBaselineApply(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bl, err := StartBaseline(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer bl.Close()
	cmd := make([]byte, 200)
	b.ResetTimer()
	for range b.N {
		if err := bl.Apply(context.Background(), cmd); err != nil {
			b.Fatal(err)
		}
	}
}
