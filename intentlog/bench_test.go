package intentlog

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
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

// BenchmarkDedupeBytesPerID measures what one remembered intent ID costs on disk, for
// IDs of 20 to 40 bytes (uniformly, random characters), signed (seq and hash stored):
//
//   - db-B/ID: growth of the bbolt database (its high-water mark, tx.Size: what the
//     file needs) per ID, when nothing but IDs are written (dedupe + dedupe_order);
//   - buckets-B/ID: the pages the two dedupe buckets occupy per ID after a realistic
//     run through the apply (intents entries of 1000, each signed by a commit), with
//     records and the chain excluded.
//
// Run it once: go test ./intentlog -run XXX -bench DedupeBytesPerID -benchtime 1x
func BenchmarkDedupeBytesPerID(b *testing.B) {
	const n = 200_000
	rng := rand.New(rand.NewSource(1))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	id := func() string {
		buf := make([]byte, 20+rng.Intn(21))
		for i := range buf {
			buf[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return string(buf)
	}
	for i := 0; i < b.N; i++ {
		// Direct: only dedupe entries, in transactions of 1000.
		f, err := NewFSM(b.TempDir(), testVerify)
		if err != nil {
			b.Fatal(err)
		}
		size := func() (s int64) {
			_ = f.db.View(func(tx *bolt.Tx) error { s = tx.Size(); return nil })
			return s
		}
		start := size()
		var hash [32]byte
		for done := 0; done < n; done += 1000 {
			err := f.db.Update(func(tx *bolt.Tx) error {
				a := &applier{tx: tx, budget: evictPerEntry}
				a.m = a.readMeta()
				for j := 0; j < 1000; j++ {
					d := dedupeEntry{Order: a.m.DedupeNext, Index: uint64(done + j + 1), LogTime: 1_700_000_000_000 + int64(done), Seq: uint64(done/1000 + 1), Hash: hash}
					hash[0]++
					a.dedupeStore(id(), d)
				}
				return tx.Bucket(bMeta).Put(keyState, a.m.encode())
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size()-start)/n, "db-B/ID")
		f.Close()

		// Through the apply, signed.
		h := &harness{t: b}
		if h.f, err = NewFSM(b.TempDir(), testVerify); err != nil {
			b.Fatal(err)
		}
		h.f.db.NoSync = true
		held(h)
		for done := 0; done < n; done += 1000 {
			ins := make([]Intent, 1000)
			for j := range ins {
				ins[j] = Intent{ID: id(), Op: OpPut, Path: "c/r", Value: []byte("v")}
			}
			h.mustAccept(IntentsEntry{Intents: ins})
			if r, _ := h.commitPending(1000); !r.Accepted {
				b.Fatal(r.Reason)
			}
		}
		var used int
		_ = h.f.db.View(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{bDedupe, bDedupeOrder} {
				st := tx.Bucket(name).Stats()
				used += st.BranchAlloc + st.LeafAlloc
			}
			return nil
		})
		b.ReportMetric(float64(used)/n, "buckets-B/ID")
		h.f.Close()
	}
}

// BenchmarkApplyCarried64Clients applies commits that carry 32 intents each, with IDs
// and paths as 64 closed-loop clients send them ("c<client>-<n>", each client its own
// counter): the shape of baton bench's load at 64 clients, whose intents land in
// B-tree leaves no other intent of the commit shares. The other shapes give IDs or
// paths from one counter, so that commit's keys share leaves: what the scattered
// dedupe keys and the scattered record paths each cost. The store is first filled with
// 200,000 remembered intents. ms/commit is one commit's apply; pages-written/commit
// and nodes/commit are bbolt's counts for it (each page written is one pwrite).
func BenchmarkApplyCarried64Clients(b *testing.B) {
	for _, shape := range []struct{ ids, paths string }{
		{"per-client", "per-client"},
		{"per-client", "one-counter"},
		{"one-counter", "one-counter"},
	} {
		ids := shape.ids
		b.Run("ids="+ids+"/paths="+shape.paths, func(b *testing.B) {
			h := newHarness(b)
			held(h)
			value := []byte(strings.Repeat("v", 200))
			const clients, perCommit = 64, 32
			next := make([]int, clients)
			rng := rand.New(rand.NewSource(1))
			var total int
			commit := func() {
				ops := make([]Intent, perCommit)
				for i := range ops {
					var id string
					if ids == "per-client" {
						c := rng.Intn(clients)
						id = fmt.Sprintf("c%d-%d", c, next[c])
						next[c]++
					} else {
						id = fmt.Sprintf("t%d", total)
					}
					path := "bench/" + id
					if shape.paths == "one-counter" {
						path = fmt.Sprintf("bench/t%d", total)
					}
					total++
					ops[i] = Intent{ID: id, Op: OpPut, Path: path, Value: value}
				}
				if res, _ := h.commitOps(int64(1000+total), ops...); !res.Accepted {
					b.Fatalf("commit rejected: %s", res.Reason)
				}
			}
			for total < 200_000 {
				commit()
			}
			b.ReportAllocs()
			s0 := h.f.db.Stats()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				commit()
			}
			b.StopTimer()
			s1 := h.f.db.Stats()
			d := s1.TxStats.Sub(&s0.TxStats)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/commit")
			// What bbolt did per commit: pages written (one pwrite each) and B-tree
			// nodes read into memory to be changed.
			b.ReportMetric(float64(d.GetWrite())/float64(b.N), "pages-written/commit")
			b.ReportMetric(float64(d.GetNodeCount())/float64(b.N), "nodes/commit")
		})
	}
}
