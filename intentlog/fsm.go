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

	fault    atomic.Pointer[FaultError] // nil when healthy
	haltCh   chan struct{}              // closed when the FSM first halts
	haltOnce sync.Once
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
		haltCh:     make(chan struct{}),
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
//
// An entry that cannot be applied on this replica (its bytes in raft.db are corrupt,
// see ErrCorrupt) halts the FSM: the entries before it in the batch are applied, it
// and every later entry are not (their response is the *FaultError), and Fault reports
// it. It never panics for that.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	f.mu.RLock()
	defer f.mu.RUnlock()
	refuse := func(from int, err error) {
		for i := from; i < len(out); i++ {
			out[i] = err
		}
	}
	if f.db == nil {
		refuse(0, ErrClosed)
		return out
	}
	if fe := f.halted(); fe != nil {
		refuse(0, fe)
		return out
	}
	old := f.hot.Load()
	a, stop, fe := f.applyTx(old, logs)
	if fe != nil && stop > 0 {
		// The transaction was rolled back. Apply the entries before the fault again
		// (the apply is deterministic: the same results), so that exactly those are
		// applied whatever the batching.
		var fe2 *FaultError
		if a, _, fe2 = f.applyTx(old, logs[:stop]); fe2 != nil {
			fe, stop, a = fe2, 0, nil // cannot happen: they applied a moment ago
		}
	}
	if a != nil {
		copy(out, a.out)
		rej := old.rejections
		if a.rejDirty {
			rej = a.rej
		}
		f.hot.Store(&hotState{view: viewOf(a.m), configIdx: a.m.ConfigIndex, rejections: rej})
		// Wake watchers whenever the view moved (the applied index counts:
		// WaitApplied relies on it), even if the entries were duplicates or skipped.
		if a.changed || a.m.Applied != old.view.AppliedIndex {
			f.notify.publish(a.events)
		}
	}
	if fe != nil {
		refuse(stop, fe)
		f.raise(fe)
	}
	return out
}

// applyAbort is how the applier stops a batch at an entry this replica cannot apply:
// raised with panic, recovered in applyTx, never seen outside this file and apply.go.
type applyAbort struct{ fault *FaultError }

var errAborted = errors.New("intentlog: batch aborted")

// applyTx applies logs in one write transaction. It returns the applier (results,
// events, the new meta), or, when an entry halts the FSM, the rolled-back batch's
// fault and the position of that entry.
func (f *FSM) applyTx(old *hotState, logs []*raft.Log) (a *applier, stop int, fe *FaultError) {
	err := f.db.Update(func(tx *bolt.Tx) (err error) {
		a = &applier{tx: tx, verify: f.verify, knobs: f.knobs, maxPend: f.maxPending, histMax: f.historyLen,
			m: readMeta(tx), rej: maps.Clone(old.rejections), out: make([]any, len(logs))}
		defer func() {
			if r := recover(); r != nil {
				ab, ok := r.(applyAbort)
				if !ok {
					panic(r)
				}
				fe, stop, err = ab.fault, a.pos, errAborted
			}
		}()
		for i, l := range logs {
			a.pos = i
			a.out[i] = a.apply(l)
		}
		return tx.Bucket(bMeta).Put(keyState, a.m.encode())
	})
	if fe != nil {
		return nil, stop, fe
	}
	if err != nil {
		// The transaction could not be committed (disk full, I/O error). Carrying on
		// would let this replica diverge from the others.
		panic(fmt.Sprintf("intentlog: commit state transaction: %v", err))
	}
	return a, len(logs), nil
}

// raise records a fault. A halting one is permanent (until a restore replaces the
// state): it wakes watchers and signals haltCh.
func (f *FSM) raise(fe *FaultError) {
	f.fault.Store(fe)
	if fe.Halted {
		f.haltOnce.Do(func() { close(f.haltCh) })
	}
	f.notify.publish(nil)
}

// halted returns the halting fault, or nil.
func (f *FSM) halted() *FaultError {
	if fe := f.fault.Load(); fe != nil && fe.Halted {
		return fe
	}
	return nil
}

// Fault returns the current storage fault (a *FaultError), or nil when healthy.
func (f *FSM) Fault() error {
	if fe := f.fault.Load(); fe != nil {
		return fe
	}
	return nil
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
