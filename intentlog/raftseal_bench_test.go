package intentlog

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkRaftStore compares raft-boltdb bare with the sealed wrappers Raft writes
// through: batches of 64 entries of 256 bytes (StoreLogs), and single reads (GetLog),
// with fsync (as deployed) and without (the CPU cost alone). Report the ratios of the
// sealed to the bare figures of one run.
func BenchmarkRaftStore(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		for _, sealed := range []bool{false, true} {
			name := fmt.Sprintf("nosync=%v/sealed=%v", noSync, sealed)
			s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), RaftFile), NoSync: noSync})
			if err != nil {
				b.Fatal(err)
			}
			var ls raft.LogStore = s
			if sealed {
				ls = sealedLogStore{LogStore: s}
			}
			data := make([]byte, 256)
			batch := make([]*raft.Log, 64)
			var next uint64 = 1
			b.Run("StoreLogs/"+name, func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					for i := range batch {
						batch[i] = &raft.Log{Index: next, Term: 3, Type: raft.LogCommand, Data: data}
						next++
					}
					if err := ls.StoreLogs(batch); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("GetLog/"+name, func(b *testing.B) {
				b.ReportAllocs()
				var l raft.Log
				for i := range b.N {
					if err := ls.GetLog(1+uint64(i)%(next-1), &l); err != nil {
						b.Fatal(err)
					}
				}
			})
			s.Close()
		}
	}
}

// BenchmarkSealInmem is the wrappers' own cost: over raft's in-memory store (no
// encoding, no disk), so the sealed/bare ratio is an upper bound of what sealing
// adds to raft-boltdb.
func BenchmarkSealInmem(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		s := raft.NewInmemStore()
		var ls raft.LogStore = s
		if sealed {
			ls = sealedLogStore{LogStore: s}
		}
		data := make([]byte, 256)
		batch := make([]*raft.Log, 64)
		b.Run(fmt.Sprintf("StoreLogs/sealed=%v", sealed), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				for i := range batch { // the same 64 indexes: the store does not grow
					batch[i] = &raft.Log{Index: uint64(i) + 1, Term: 3, Type: raft.LogCommand, Data: data}
				}
				if err := ls.StoreLogs(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("GetLog/sealed=%v", sealed), func(b *testing.B) {
			b.ReportAllocs()
			var l raft.Log
			for i := range b.N {
				if err := ls.GetLog(1+uint64(i)%64, &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
