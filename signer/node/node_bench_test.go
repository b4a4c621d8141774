package node

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// benchCluster starts three nodes (one bootstraps, two join) and returns a follower
// that does not hold the lease, so submissions are forwarded to the Raft leader.
func benchCluster(b *testing.B) *Node {
	_, f := benchNodes(b)
	return f
}

// benchNodes starts three nodes and returns the lease holder and a follower.
func benchNodes(b *testing.B) (holder, follower *Node) {
	b.Helper()
	psk, key, root := testutil.PSK(b), testutil.Key(b, 9), b.TempDir()
	cfg := nodeConfig(b, filepath.Join(root, "0"), psk, key)
	cfg.Bootstrap = true
	first := startNode(b, cfg)
	testutil.WaitFor(b, 10*time.Second, "leader", func() bool { return first.State().Raft.Role == "Leader" })
	token := []byte("bench-token")
	first.AllowJoins(token, time.Now().Add(time.Minute), 2)
	nodes := []*Node{first}
	for i := 1; i < 3; i++ {
		cfg := nodeConfig(b, filepath.Join(root, fmt.Sprint(i)), psk, key)
		cfg.Join = &JoinConfig{Seeds: first.Addrs(), Token: token}
		nodes = append(nodes, startNode(b, cfg))
	}
	testutil.WaitFor(b, 10*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
	h := holderOf(nodes...)
	for _, n := range nodes {
		if !n.Holds() && n.State().Raft.Role != "Leader" {
			return h, n
		}
	}
	for _, n := range nodes {
		if !n.Holds() {
			return h, n
		}
	}
	return h, nodes[1]
}

// BenchmarkHolderSubmit64 measures signed submissions on the lease holder (the
// one-round commit path) with 64 concurrent callers.
//
//	go test ./signer/node -run '^$' -bench HolderSubmit64 -benchtime 20000x -cpuprofile cpu.out
func BenchmarkHolderSubmit64(b *testing.B) {
	h, _ := benchNodes(b)
	var seq atomic.Int64
	val := make([]byte, 200)
	b.SetParallelism(64 / max(1, testingProcs()))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			in := testutil.Put(fmt.Sprintf("h-%d", seq.Add(1)))
			in.Value = val
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := h.Submit(ctx, in, WaitSigned); err != nil {
				cancel()
				b.Error(err)
				return
			}
			cancel()
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "intents/s")
	st := h.loop.Stats()
	b.ReportMetric(float64(b.N)/float64(max(1, st.CommitsAccepted)), "intents/commit")
}

// BenchmarkNodeSubmit measures Submit on a follower of a three-node libp2p cluster on
// loopback with 32 concurrent callers: committed (in the Raft log) and signed (the
// commit applied locally). Values are 256 bytes.
//
//	go test ./signer -run '^$' -bench NodeSubmit -benchtime 2000x
func BenchmarkNodeSubmit(b *testing.B) {
	for _, wait := range []Wait{WaitCommitted, WaitSigned} {
		name := map[Wait]string{WaitCommitted: "committed", WaitSigned: "signed"}[wait]
		b.Run(name+"-serial", func(b *testing.B) {
			n := benchCluster(b)
			val := make([]byte, 256)
			b.ResetTimer()
			for i := range b.N {
				in := testutil.Put(fmt.Sprintf("s-%d", i))
				in.Value = val
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if _, err := n.Submit(ctx, in, wait); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
		b.Run(name+"-32", func(b *testing.B) {
			n := benchCluster(b)
			var seq atomic.Int64
			val := make([]byte, 256)
			before := n.batch.entriesMade()
			b.SetParallelism(32 / max(1, testingProcs()))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("b-%d", seq.Add(1))
					in := testutil.Put(id)
					in.Value = val
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					if _, err := n.Submit(ctx, in, wait); err != nil {
						cancel()
						b.Error(err)
						return
					}
					cancel()
				}
			})
			el := time.Since(start)
			b.ReportMetric(float64(b.N)/el.Seconds(), "intents/s")
			b.ReportMetric(float64(b.N)/float64(max(1, n.batch.entriesMade()-before)), "intents/entry")
		})
	}
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
