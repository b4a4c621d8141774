package transport

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

var (
	benchPairs   = flag.Int("bench.pairs", 5, "alternated libp2p/TCP pairs in BenchmarkProposeLibp2pVsTCP")
	benchOps     = flag.Int("bench.ops", 3000, "proposals per throughput phase")
	benchWorkers = flag.Int("bench.workers", 32, "concurrent proposers in a throughput phase")
	benchLatOps  = flag.Int("bench.latops", 200, "sequential proposals per latency phase")
	benchSize    = flag.Int("bench.size", 256, "entry size in bytes")
)

// benchCluster is three raft nodes with raft-boltdb (fsync on) over one transport.
type benchCluster struct {
	name   string
	rafts  []*raft.Raft
	stores []*raftboltdb.BoltStore
	hosts  []*Host    // libp2p only
	cls    []*Cluster // libp2p only
	closer []func()
}

func benchRaftConfig(id string) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id)
	c.Logger = hclog.NewNullLogger()
	c.SnapshotThreshold = 1 << 30
	c.SnapshotInterval = time.Hour
	return c
}

func newBenchCluster(b *testing.B, name string) *benchCluster {
	b.Helper()
	bc := &benchCluster{name: name}
	var trans []raft.Transport
	var ids []string
	switch name {
	case "libp2p":
		psk, _ := GeneratePSK()
		for range 3 {
			h := newTestHost(b, b.TempDir(), psk, "/ip4/127.0.0.1/tcp/0")
			bc.hosts = append(bc.hosts, h)
		}
		for _, h := range bc.hosts {
			for _, o := range bc.hosts {
				if o != h {
					if err := h.AddMember(o.AddrInfo()); err != nil {
						b.Fatal(err)
					}
				}
			}
			t, err := h.RaftTransport(RaftTransportConfig{Logger: hclog.NewNullLogger()})
			if err != nil {
				b.Fatal(err)
			}
			trans = append(trans, t)
			ids = append(ids, h.ID().String())
		}
	case "tcp":
		for range 3 {
			t, err := raft.NewTCPTransport("127.0.0.1:0", nil, DefaultRaftMaxPool, DefaultRaftTimeout, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			trans = append(trans, t)
			ids = append(ids, string(t.LocalAddr()))
		}
	}
	var servers []raft.Server
	for i, t := range trans {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(ids[i]), Address: t.LocalAddr()})
	}
	for i, t := range trans {
		dir := b.TempDir()
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")}) // fsync on
		if err != nil {
			b.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		r, err := raft.NewRaft(benchRaftConfig(ids[i]), &testFSM{}, store, store, snaps, t)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			b.Fatal(err)
		}
		bc.rafts = append(bc.rafts, r)
		bc.stores = append(bc.stores, store)
		if name == "libp2p" {
			c, err := NewCluster(bc.hosts[i], r, raftApply(r), ClusterConfig{Logger: testLogger(b)})
			if err != nil {
				b.Fatal(err)
			}
			bc.cls = append(bc.cls, c)
		}
	}
	b.Cleanup(bc.close)
	waitFor(b, 20*time.Second, name+" leader", func() bool { return bc.leader() >= 0 })
	return bc
}

func (bc *benchCluster) leader() int {
	for i, r := range bc.rafts {
		if r.State() == raft.Leader {
			return i
		}
	}
	return -1
}

func (bc *benchCluster) close() {
	for _, c := range bc.cls {
		_ = c.Close()
	}
	for _, r := range bc.rafts {
		_ = r.Shutdown().Error()
	}
	for _, s := range bc.stores {
		_ = s.Close()
	}
	for _, h := range bc.hosts {
		_ = h.Close()
	}
}

// apply applies entry on the current leader. A leadership change (fsync stalls on a
// loaded machine can cost the leader its lease) is retried on the new leader, a
// bounded number of times.
func (bc *benchCluster) apply(entry []byte) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := bc.leader()
		if l >= 0 {
			err := bc.rafts[l].Apply(entry, 10*time.Second).Error()
			if err == nil || !isNotLeader(err) || time.Now().After(deadline) {
				return err
			}
		} else if time.Now().After(deadline) {
			return ErrNoLeader
		}
		time.Sleep(20 * time.Millisecond) // waiting for an election; bounded by deadline
	}
}

// throughput applies ops entries on the leader from workers goroutines; ops/s.
func (bc *benchCluster) throughput(b *testing.B, ops, workers int, entry []byte) float64 {
	var wg sync.WaitGroup
	next := make(chan struct{}, ops)
	for range ops {
		next <- struct{}{}
	}
	close(next)
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if err := bc.apply(entry); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	select {
	case err := <-errs:
		b.Fatalf("%s apply: %v", bc.name, err)
	default:
	}
	return float64(ops) / el.Seconds()
}

// latency returns the median of n sequential proposals made through propose.
func latency(b *testing.B, n int, propose func() error) time.Duration {
	ds := make([]time.Duration, 0, n)
	for range n {
		s := time.Now()
		if err := propose(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(s))
	}
	return median(ds)
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkProposeLibp2pVsTCP compares raft over the libp2p stream layer with raft's
// own TCP transport: same FSM, raft-boltdb with fsync, same raft config, three nodes
// on 127.0.0.1. It alternates pairs (ABBA order) and reports medians, because single
// runs on shared machines vary widely. It also measures a follower's forwarded
// proposal against a proposal on the leader (libp2p). Run it once:
//
//	go test ./transport -run '^$' -bench ProposeLibp2pVsTCP -benchtime 1x
func BenchmarkProposeLibp2pVsTCP(b *testing.B) {
	entry := make([]byte, *benchSize)
	lp := newBenchCluster(b, "libp2p")
	tcp := newBenchCluster(b, "tcp")
	// Warm up both (connections, pools, bolt file growth).
	lp.throughput(b, 300, *benchWorkers, entry)
	tcp.throughput(b, 300, *benchWorkers, entry)

	var lpTP, tcpTP []float64
	var lpLat, tcpLat, fwdLat []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := range *benchPairs {
			order := []*benchCluster{lp, tcp}
			if i%2 == 1 {
				order = []*benchCluster{tcp, lp}
			}
			for _, bc := range order {
				tp := bc.throughput(b, *benchOps, *benchWorkers, entry)
				lat := latency(b, *benchLatOps, func() error { return bc.apply(entry) })
				if bc == lp {
					lpTP, lpLat = append(lpTP, tp), append(lpLat, lat)
					// A follower's proposal: one forward round trip plus the commit.
					fol := bc.cls[(max(bc.leader(), 0)+1)%3]
					fwd := latency(b, *benchLatOps, func() error {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						_, err := fol.Propose(ctx, entry)
						return err
					})
					fwdLat = append(fwdLat, fwd)
				} else {
					tcpTP, tcpLat = append(tcpTP, tp), append(tcpLat, lat)
				}
			}
			b.Logf("pair %d: libp2p %.0f ops/s p50 %v (forwarded p50 %v) | tcp %.0f ops/s p50 %v",
				i+1, lpTP[len(lpTP)-1], lpLat[len(lpLat)-1], fwdLat[len(fwdLat)-1], tcpTP[len(tcpTP)-1], tcpLat[len(tcpLat)-1])
		}
	}
	b.StopTimer()
	var tpRatios, latRatios []float64
	for i := range lpTP {
		tpRatios = append(tpRatios, lpTP[i]/tcpTP[i])
		latRatios = append(latRatios, float64(lpLat[i])/float64(tcpLat[i]))
	}
	mLP, mTCP := median(lpTP), median(tcpTP)
	lLP, lTCP, lFwd := median(lpLat), median(tcpLat), median(fwdLat)
	b.ReportMetric(mLP, "libp2p-ops/s")
	b.ReportMetric(mTCP, "tcp-ops/s")
	b.ReportMetric(mLP/mTCP, "tput-ratio")
	b.ReportMetric(float64(lLP.Microseconds()), "libp2p-p50-µs")
	b.ReportMetric(float64(lTCP.Microseconds()), "tcp-p50-µs")
	b.ReportMetric(float64(lFwd.Microseconds()), "fwd-p50-µs")
	b.ReportMetric(float64(lLP)/float64(lTCP), "lat-ratio")
	b.ReportMetric(median(tpRatios), "pair-tput-ratio-p50")
	b.ReportMetric(median(latRatios), "pair-lat-ratio-p50")
	fmt.Printf("medians over %d pairs: throughput libp2p %.0f ops/s, tcp %.0f ops/s, ratio %.2f; "+
		"latency p50 libp2p %v, tcp %v, ratio %.2f; follower-forwarded p50 %v (+%v over leader)\n",
		len(lpTP), mLP, mTCP, mLP/mTCP, lLP, lTCP, float64(lLP)/float64(lTCP), lFwd, lFwd-lLP)
	fmt.Printf("median of per-pair ratios: throughput %.2f, latency %.2f\n", median(tpRatios), median(latRatios))
}
