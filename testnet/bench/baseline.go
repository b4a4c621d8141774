package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/internal/wait"
)

// Baseline is three plain hashicorp/raft nodes on 127.0.0.1 with raft-boltdb/v2
// (fsync on), raft's TCP transport, raft.DefaultConfig and a trivial FSM (it counts
// entries): the reference baton's figures are divided by.
type Baseline struct {
	rafts  []*raft.Raft
	stores []*raftboltdb.BoltStore
	trans  []*raft.NetworkTransport
	dirs   []string
	whos   []uintptr
}

// counterFSM is the baseline's trivial state machine.
type counterFSM struct {
	n   atomic.Uint64
	who uintptr // in the latency trace
}

// baselineWho numbers the baseline's replicas in the trace (far from baton's).
const baselineWho = 1 << 20

func (f *counterFSM) Apply(l *raft.Log) any {
	stages.Mark(stages.ApplyStart, l.Index, l.Index, f.who)
	defer stages.Mark(stages.ApplyEnd, l.Index, l.Index, f.who)
	return f.n.Add(1)
}

func (f *counterFSM) Snapshot() (raft.FSMSnapshot, error) { return counterSnap(f.n.Load()), nil }

func (f *counterFSM) Restore(rc io.ReadCloser) error { return rc.Close() }

type counterSnap uint64

func (counterSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (counterSnap) Release()                          {}

// StartBaseline starts the three nodes with their stores under dir and waits (bounded
// by ctx) for a leader.
func StartBaseline(ctx context.Context, dir string) (*Baseline, error) {
	b := &Baseline{}
	var servers []raft.Server
	for i := range 3 {
		t, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("baseline transport: %w", err)
		}
		b.trans = append(b.trans, t)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprint("raft", i)), Address: t.LocalAddr()})
	}
	for i, t := range b.trans {
		d := filepath.Join(dir, fmt.Sprint("raft", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Close()
			return nil, err
		}
		b.dirs = append(b.dirs, d)
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(d, "raft.db")})
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("baseline store: %w", err)
		}
		b.stores = append(b.stores, store)
		snaps, err := raft.NewFileSnapshotStore(d, 1, io.Discard)
		if err != nil {
			b.Close()
			return nil, err
		}
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.Logger = hclog.NewNullLogger()
		who := uintptr(baselineWho + i)
		b.whos = append(b.whos, who)
		r, err := raft.NewRaft(c, &counterFSM{who: who}, stages.LogStore{LogStore: store, Who: who}, store, snaps, t)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("baseline raft: %w", err)
		}
		b.rafts = append(b.rafts, r)
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			b.Close()
			return nil, fmt.Errorf("baseline bootstrap: %w", err)
		}
	}
	if err := wait.Until(ctx, "a baseline raft leader", func() bool { return b.leader() != nil }); err != nil {
		b.Close()
		return nil, fmt.Errorf("baseline leader: %w", err)
	}
	return b, nil
}

func (b *Baseline) leader() *raft.Raft {
	r, _ := b.leaderWho()
	return r
}

func (b *Baseline) leaderWho() (*raft.Raft, uintptr) {
	for i, r := range b.rafts {
		if r.State() == raft.Leader {
			return r, b.whos[i]
		}
	}
	return nil, 0
}

// Apply applies cmd on the current leader, retrying on a leader change until ctx ends.
func (b *Baseline) Apply(ctx context.Context, cmd []byte) error {
	for {
		var r *raft.Raft
		var who uintptr
		if err := wait.Until(ctx, "a baseline raft leader", func() bool { r, who = b.leaderWho(); return r != nil }); err != nil {
			return err
		}
		stages.Mark(stages.RaftApply, 0, 0, who)
		f := r.Apply(cmd, 10*time.Second)
		err := f.Error()
		if err == nil {
			stages.Mark(stages.RaftDone, f.Index(), f.Index(), who)
			stages.Mark(stages.Answered, f.Index(), f.Index(), 0)
		}
		if err == nil || !(errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost)) {
			return err
		}
	}
}

// DiskBytes is the size of the three nodes' files.
func (b *Baseline) DiskBytes() int64 {
	var n int64
	for _, d := range b.dirs {
		n += dirBytes(d)
	}
	return n
}

// Close shuts the nodes down.
func (b *Baseline) Close() {
	for _, r := range b.rafts {
		_ = r.Shutdown().Error()
	}
	for _, s := range b.stores {
		_ = s.Close()
	}
	for _, t := range b.trans {
		_ = t.Close()
	}
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// runLoad runs clients goroutines calling op in a loop for window (after ctx-bounded
// start) and returns the completed operations per second and their latencies. The
// first error stops the run and is returned.
func runLoad(ctx context.Context, clients int, window time.Duration, op func(ctx context.Context, client, i int) error) (float64, []time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		lats  []time.Duration
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(window)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; time.Now().Before(end); i++ {
				s := time.Now()
				if err := op(ctx, c, i); err != nil {
					mu.Lock()
					if first == nil && ctx.Err() == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					break
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if first != nil {
		return 0, nil, first
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	return float64(len(lats)) / el.Seconds(), lats, nil
}
