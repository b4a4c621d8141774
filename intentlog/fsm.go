package intentlog

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/stages"
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
	maxPending  uint64
	historyLen  uint64
	digestEvery uint64
	digestKeep  uint64

	// applied, when set, is called after each batch with every command entry the
	// batch applied and its result (the leader's nudges, log.go): after the state
	// transaction, outside the apply's state.
	applied atomic.Pointer[func(data []byte, res Result)]

	mu     sync.RWMutex // held for reading while using db; for writing to swap it
	db     *bolt.DB
	hot    atomic.Pointer[hotState]
	notify *notifier

	restores atomic.Uint64 // snapshots restored since open (observability, tests)
	// staleRestores counts snapshots not restored because the state was at or past
	// them (Restore).
	staleRestores atomic.Uint64
	who           uintptr      // this replica's number in the latency trace (stages.go)
	pre           *preverifier // commits' verification ahead of the apply (preverify.go)
	stored        *storeTimes  // the Log's store times (nil: none), forgotten by Restore

	fault    atomic.Pointer[FaultError] // nil when healthy
	haltCh   chan struct{}              // closed when the FSM first halts
	haltOnce sync.Once
	gaveUp   atomic.Bool   // a write never succeeded and Close gave up on it: apply nothing more
	closing  chan struct{} // closed when Close begins: stops the write retries
	closeOne sync.Once

	// update runs fn in a write transaction (the state file's Update). Tests replace
	// it to make commits fail (ENOSPC, EIO) or panic.
	update func(fn func(*bolt.Tx) error) error
	// retryWait waits before retry attempt n of a failed write and reports whether to
	// retry: false once Close has begun. Tests replace it to drive the retries.
	retryWait func(n int) bool
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
	digestIdx  uint64
	digest     [32]byte
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
	who, pre := replicaSeq.Add(1), newPreverifier(verify)
	f := &FSM{
		path:        filepath.Join(dir, StateFile),
		verify:      markingVerifier(pre.verifier(), who),
		who:         who,
		pre:         pre,
		maxPending:  MaxPending,
		historyLen:  LeaseHistoryLen,
		digestEvery: DigestEvery,
		digestKeep:  DigestKeep,
		notify:      newNotifier(),
		haltCh:      make(chan struct{}),
		closing:     make(chan struct{}),
	}
	if k != nil {
		f.knobs = *k // a copy: the apply's behaviour cannot change under it
	}
	f.update = func(fn func(*bolt.Tx) error) error { return f.db.Update(fn) }
	f.retryWait = f.backoff
	if err := prepareState(f.path); err != nil {
		return nil, err
	}
	if err := checkStateFile(f.path); err != nil { // a bad one is set aside, rebuilt
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
	err = f.loadHot()
	if errors.Is(err, ErrCorrupt) {
		// The meta record or the counters do not verify: set the file aside (never
		// repair it) and start empty, to be rebuilt from the snapshot and the log.
		db.Close()
		if _, err := setAside(f.path, "corrupt"); err != nil {
			return nil, err
		}
		if f.db, err = openState(f.path); err != nil {
			return nil, err
		}
		err = f.loadHot()
	}
	if err != nil {
		f.db.Close()
		return nil, err
	}
	return f, nil
}

func (f *FSM) loadHot() error {
	return f.db.View(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		rej, err := readRejections(tx)
		if err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		f.hot.Store(&hotState{view: viewOf(m), configIdx: m.ConfigIndex, rejections: rej, digestIdx: m.DigestIndex, digest: m.Digest})
		return nil
	})
}

// openValue verifies a stored value read outside the apply. A value that does not
// verify is never served: it raises the halting fault (the state cannot be trusted any
// more) and returns it, naming state.db and the key.
func (f *FSM) openValue(bucket, key, stored []byte) ([]byte, error) {
	p, err := openStored(bucket, key, stored)
	if err != nil {
		fe := &FaultError{File: StateFile, Index: f.View().AppliedIndex, Key: keyName(bucket, key), Halted: true, Err: err}
		f.raise(fe)
		return nil, fe
	}
	return p, nil
}

func viewOf(m metaState) View {
	return View{AppliedIndex: m.Applied, Lease: m.Lease, Head: m.Head,
		Pending: int(m.PendCount), PendingBytes: int64(m.PendBytes), Chain: m.Chain, Genesis: m.Genesis,
		LogTime: m.LogTime, Remembered: int(m.DedupeCount), TimeClamped: m.TimeClamped}
}

// Close closes the state file and every subscription. During a write fault it gives up
// the retries and returns the fault; after a write fault that never cleared, or a
// corrupt stored value, it does not mark the file clean (so the next start sets it
// aside and rebuilds the state from the snapshot and the log).
func (f *FSM) Close() error {
	f.beginClose()
	f.notify.close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		return nil
	}
	if fe := f.fault.Load(); fe != nil && (!fe.Halted || fe.File == StateFile) {
		cerr := f.db.Close()
		f.db = nil
		return errors.Join(fmt.Errorf("close state: %w", fe), cerr)
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
	if f.gaveUp.Load() {
		refuse(0, f.Fault())
		return out
	}
	// A memory fault (a torn or truncated file under the mmap) panics instead of
	// killing the process; tryTx turns it into a fault.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	stages.Mark(stages.ApplyStart, logs[0].Index, logs[len(logs)-1].Index, f.who)
	defer stages.Mark(stages.ApplyEnd, logs[0].Index, logs[len(logs)-1].Index, f.who)
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
		f.hot.Store(&hotState{view: viewOf(a.m), configIdx: a.m.ConfigIndex, rejections: rej,
			digestIdx: a.m.DigestIndex, digest: a.m.Digest})
		// Wake watchers whenever the view moved (the applied index counts:
		// WaitApplied relies on it), even if the entries were duplicates or skipped.
		if a.changed || a.m.Applied != old.view.AppliedIndex {
			f.notify.publish(a.events)
		}
		if fn := f.applied.Load(); fn != nil {
			for i, l := range logs {
				if res, ok := out[i].(Result); ok && l.Type == raft.LogCommand {
					(*fn)(l.Data, res)
				}
			}
		}
	}
	if fe != nil {
		refuse(stop, fe)
		if fe.Halted {
			f.raise(fe)
		}
	}
	return out
}

// applyAbort is how the applier stops a batch at an entry this replica cannot apply:
// raised with panic, recovered in tryTx, never seen outside this file and apply.go.
type applyAbort struct{ fault *FaultError }

var errAborted = errors.New("intentlog: batch aborted")

// maxRetryDelay bounds the wait between retries of a failed state write.
const maxRetryDelay = time.Second

// retryDelay is the wait before retry attempt n: 1 ms doubling, at most maxRetryDelay.
func retryDelay(n int) time.Duration {
	if n >= 10 {
		return maxRetryDelay
	}
	return min(time.Millisecond<<n, maxRetryDelay)
}

// backoff is the production retryWait.
func (f *FSM) backoff(n int) bool {
	t := time.NewTimer(retryDelay(n))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.closing:
		return false
	}
}

// beginClose stops write retries (Close calls it before it waits for the apply).
func (f *FSM) beginClose() { f.closeOne.Do(func() { close(f.closing) }) }

// applyTx applies logs in one write transaction. It returns the applier (results,
// events, the new meta), or, when an entry halts the FSM, the rolled-back batch's
// fault and the position of that entry. A commit that fails (a full disk, an I/O
// error) is retried with a bounded backoff, blocking the apply: nothing is lost or
// skipped, and Fault reports the failure until a write succeeds. Only Close ends the
// retries; the batch is then given up (not applied) and nothing more is.
func (f *FSM) applyTx(old *hotState, logs []*raft.Log) (a *applier, stop int, fe *FaultError) {
	for attempt := 0; ; attempt++ {
		a, stop, fe, werr := f.tryTx(old, logs)
		if werr == nil || fe != nil {
			if attempt > 0 {
				f.fault.Store(nil) // the write fault cleared (a halting fe is raised by the caller)
				f.notify.publish(nil)
			}
			return a, stop, fe
		}
		wf := &FaultError{File: StateFile, Index: logs[0].Index, Err: werr}
		f.fault.Store(wf)
		f.notify.publish(nil)
		if !f.retryWait(attempt) {
			f.gaveUp.Store(true)
			return nil, 0, wf
		}
	}
}

// tryTx is one attempt of applyTx. werr is a failed commit of the transaction (retry);
// fe a fault that halts the FSM at position stop. Any panic in the apply (a broken
// invariant, bbolt on a damaged page, a memory fault reading a torn file) becomes a
// halting fault: the FSM never takes the process down.
func (f *FSM) tryTx(old *hotState, logs []*raft.Log) (a *applier, stop int, fe *FaultError, werr error) {
	defer func() {
		if r := recover(); r != nil {
			// Outside the entries' loop (the commit itself): nothing of the batch is
			// known to be applicable.
			a, fe, stop, werr = nil, panicFault(r, logs[0].Index), 0, nil
		}
	}()
	werr = f.update(func(tx *bolt.Tx) (err error) {
		a = &applier{tx: tx, verify: f.verify, knobs: f.knobs, maxPend: f.maxPending, histMax: f.historyLen,
			digestEvery: f.digestEvery, digestKeep: f.digestKeep,
			rej: maps.Clone(old.rejections), out: make([]any, len(logs))}
		defer func() {
			if r := recover(); r != nil {
				if ab, ok := r.(applyAbort); ok {
					fe = ab.fault
				} else {
					fe = panicFault(r, logs[a.pos].Index)
				}
				stop, err = a.pos, errAborted
			}
		}()
		a.m = a.readMeta()
		for i, l := range logs {
			a.pos = i
			a.out[i] = a.apply(l)
		}
		return tx.Bucket(bMeta).Put(keyState, a.m.encode())
	})
	if fe != nil {
		return nil, stop, fe, nil
	}
	return a, len(logs), nil, werr
}

// panicFault turns a recovered panic into a halting fault.
func panicFault(r any, index uint64) *FaultError {
	var err error
	if re, ok := r.(interface{ Addr() uintptr }); ok {
		// A memory fault: a page of the mmapped file is missing (truncated) or torn.
		err = fmt.Errorf("%w: memory fault reading the file: %v", ErrCorrupt, re)
	} else {
		err = fmt.Errorf("apply panicked: %v\n%s", r, debug.Stack())
	}
	return &FaultError{File: StateFile, Index: index, Key: "(unknown)", Halted: true, Err: err}
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
