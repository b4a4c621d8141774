package intentlog

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/internal/knobs"
)

// StateFile is the name of the bbolt state file in the data directory.
const StateFile = "state.db"

// FSM is the replicated state machine. It implements raft.FSM, raft.BatchingFSM and
// raft.ConfigurationStore. Its state lives in a bbolt file; a small copy of the hot
// part is kept behind an atomic pointer for non-blocking reads.
//
// Raft calls Apply, ApplyBatch, StoreConfiguration, Snapshot and Restore from one
// goroutine; the read methods may be called from any goroutine at any time.
type FSM struct {
	path   string
	verify CommitVerifier
	knobs  knobs.Intentlog // test-only behaviour changes; the zero value is production

	// Deterministic parameters: every replica must use the same values (tests lower
	// them).
	maxPending uint64
	historyLen uint64

	mu     sync.RWMutex // held for reading while using db; for writing to swap it
	db     *bolt.DB
	hot    atomic.Pointer[hotState]
	notify *notifier

	restores atomic.Uint64 // snapshots restored since open (observability, tests)
}

var (
	_ raft.FSM                = (*FSM)(nil)
	_ raft.BatchingFSM        = (*FSM)(nil)
	_ raft.ConfigurationStore = (*FSM)(nil)
)

// hotState is the in-memory copy published after every committed transaction.
type hotState struct {
	view       View
	configIdx  uint64
	rejections map[Reason]uint64 // never modified after publication
}

// NewFSM opens (or creates) the state file in dir. verify checks Commit entries; with a
// nil verifier every commit is rejected (ReasonBadSignature).
//
// A state file of an older layout is set aside (StateFile+".old-layout", never
// overwriting an earlier one) and the FSM starts empty: Raft then rebuilds the state
// from its latest snapshot (converted on restore) and the log after it, exactly as
// after a crash.
func NewFSM(dir string, verify CommitVerifier) (*FSM, error) {
	return newFSM(dir, verify, nil)
}

func newFSM(dir string, verify CommitVerifier, k *knobs.Intentlog) (*FSM, error) {
	f := &FSM{
		path:       filepath.Join(dir, StateFile),
		verify:     verify,
		maxPending: MaxPending,
		historyLen: LeaseHistoryLen,
		notify:     newNotifier(),
	}
	if k != nil {
		f.knobs = *k // a copy: the apply's behaviour cannot change under it
	}
	if err := prepareState(f.path); err != nil {
		return nil, err
	}
	db, err := openState(f.path)
	if errors.Is(err, errOldLayout) {
		if _, err = setAside(f.path, "old-layout"); err != nil {
			return nil, err
		}
		db, err = openState(f.path)
	}
	if err != nil {
		return nil, err
	}
	f.db = db
	if err := f.loadHot(); err != nil {
		db.Close()
		return nil, err
	}
	return f, nil
}

func (f *FSM) loadHot() error {
	return f.db.View(func(tx *bolt.Tx) error {
		m, err := decodeMeta(tx.Bucket(bMeta).Get(keyState))
		if err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		f.hot.Store(&hotState{view: viewOf(m), configIdx: m.ConfigIndex, rejections: readRejections(tx)})
		return nil
	})
}

func viewOf(m metaState) View {
	return View{AppliedIndex: m.Applied, Lease: m.Lease, Head: m.Head,
		Pending: int(m.PendCount), PendingBytes: int64(m.PendBytes), Chain: m.Chain, Genesis: m.Genesis,
		LogTime: m.LogTime, Remembered: int(m.DedupeCount)}
}

// Close closes the state file and every subscription.
func (f *FSM) Close() error {
	f.notify.close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		return nil
	}
	err := f.db.Sync()
	if cerr := f.db.Close(); err == nil {
		err = cerr
	}
	f.db = nil
	if err == nil {
		err = markClean(f.path)
	}
	return err
}

// Apply applies one entry (raft.FSM). It returns a Result for commands, nil otherwise.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies entries in one bbolt transaction, so one fsync (raft.BatchingFSM).
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var a *applier
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		panic("intentlog: apply on a closed FSM")
	}
	old := f.hot.Load()
	err := f.db.Update(func(tx *bolt.Tx) error {
		a = &applier{tx: tx, verify: f.verify, knobs: f.knobs, maxPend: f.maxPending, histMax: f.historyLen,
			m: readMeta(tx), rej: maps.Clone(old.rejections)}
		for i, l := range logs {
			out[i] = a.apply(l)
		}
		return tx.Bucket(bMeta).Put(keyState, a.m.encode())
	})
	if err != nil {
		// The transaction could not be committed (disk full, I/O error). Carrying on
		// would let this replica diverge from the others.
		panic(fmt.Sprintf("intentlog: commit state transaction: %v", err))
	}
	rej := old.rejections
	if a.rejDirty {
		rej = a.rej
	}
	f.hot.Store(&hotState{view: viewOf(a.m), configIdx: a.m.ConfigIndex, rejections: rej})
	// Wake watchers whenever the view moved (the applied index counts: WaitApplied
	// relies on it), even if the entries themselves were duplicates or skipped.
	if a.changed || a.m.Applied != old.view.AppliedIndex {
		f.notify.publish(a.events)
	}
	return out
}

// StoreConfiguration records Raft membership (raft.ConfigurationStore). With a
// BatchingFSM, raft delivers configuration entries through ApplyBatch instead; both
// paths store the same thing.
func (f *FSM) StoreConfiguration(index uint64, cfg raft.Configuration) {
	f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogConfiguration,
		Data: raft.EncodeConfiguration(cfg)}})
}

// View returns the hot state; it never blocks.
func (f *FSM) View() View { return f.hot.Load().view }

// Rejections returns a copy of the rejection counters by reason.
func (f *FSM) Rejections() map[Reason]uint64 { return maps.Clone(f.hot.Load().rejections) }

// read runs fn in a bbolt read transaction.
func (f *FSM) read(fn func(tx *bolt.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return ErrClosed
	}
	return f.db.View(fn)
}
