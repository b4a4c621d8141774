package intentlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/stages"
)

// Defaults for Config fields left zero.
const (
	DefaultSnapshotThreshold = 8192
	DefaultSnapshotInterval  = 2 * time.Minute
	DefaultTrailingLogs      = 10240
	DefaultSnapshotRetain    = 2
	// RaftFile is the raft-boltdb log and stable store in the data directory.
	RaftFile = "raft.db"
)

// Config configures Open. Dir, LocalID and Verify are required.
type Config struct {
	// Dir is the data directory: state.db (the applied state), raft.db (the Raft log
	// and stable store) and snapshots/ live there. Created if missing.
	Dir string
	// LocalID is this node's Raft server ID (in baton: its libp2p peer ID).
	LocalID raft.ServerID
	// Verify decodes and verifies Commit entries. Required; must be deterministic.
	Verify CommitVerifier
	// Logger receives Raft's and the log's messages. Optional, defaults to
	// slog.Default().
	Logger *slog.Logger
	// Raft, if set, may adjust the raft.Config after the fields below were applied
	// (tests shorten the timeouts here). The result is validated by Open.
	Raft func(*raft.Config)
	// SnapshotThreshold is how many new log entries trigger a snapshot. Optional,
	// defaults to DefaultSnapshotThreshold.
	SnapshotThreshold uint64
	// SnapshotInterval is how often Raft checks whether to snapshot. Optional, defaults
	// to DefaultSnapshotInterval.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries are kept after a snapshot so slow followers can
	// catch up without a snapshot install. Optional, defaults to DefaultTrailingLogs.
	TrailingLogs uint64
	// SnapshotRetain is how many snapshots are kept on disk. Optional, defaults to
	// DefaultSnapshotRetain.
	SnapshotRetain int
	// OnTerm, if set, is called with a Raft term before Raft stores it as its current
	// term (on a vote, a candidacy, or a message of a newer leader), so that a record
	// kept elsewhere (signer/node's mark) holds no term Raft never stored: one seen in
	// a message that a stopped Raft (removed from the configuration) never took would
	// make the next start look like a restored older copy. OnTerm cannot fail the
	// store (hashicorp/raft panics when storing its term fails): it reports its own
	// errors.
	OnTerm func(term uint64)
	// Hold, if set, is called once before Raft starts, with what it starts from;
	// true starts Raft held: it never campaigns until Log.Unhold (hold.go). An
	// error from reading the stores fails Open.
	Hold func(StartState) bool
	// Mono, if set, is the monotonic clock (the lease's Clock.Mono) with which the
	// Log notes when each entry was first stored in this replica's Raft log
	// (StoredAt). nil: no store times are kept.
	Mono func() time.Duration
	// Knobs re-introduce old behaviour for the simulator (see package
	// internal/knobs). nil, the only value code outside this module can set, means
	// production behaviour. Every replica of a cluster must use the same knobs.
	Knobs *knobs.Intentlog
}

func (c *Config) validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is required", ErrBadConfig)
	case c.LocalID == "":
		return fmt.Errorf("%w: LocalID is required", ErrBadConfig)
	case c.Verify == nil:
		return fmt.Errorf("%w: Verify is required", ErrBadConfig)
	case c.SnapshotInterval < 0 || c.SnapshotRetain < 0:
		return fmt.Errorf("%w: negative SnapshotInterval or SnapshotRetain", ErrBadConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.SnapshotRetain == 0 {
		c.SnapshotRetain = DefaultSnapshotRetain
	}
	return nil
}

// Log is one node of the replicated intent log: a Raft node over the given transport
// whose FSM is the deterministic apply.
type Log struct {
	cfg   Config
	fsm   *FSM
	raft  *raft.Raft
	store *raftboltdb.BoltStore
	snaps raft.SnapshotStore
	// raftFault is raft.db's write fault (Raft's own log and stable store writes).
	raftFault *raftStoreFault
	log       *slog.Logger
	closed    atomic.Bool
	nudger    *nudger
	notices   *noticeTransport // acknowledgements and sends ahead (notice.go, ahead.go); nil without
	once      sync.Once
	cerr      error
	done      chan struct{} // closed by Close: stops the halt monitor
	hold      holdState     // hold.go
}

// Open starts a Raft node in cfg.Dir over trans. A node with existing state rejoins
// its cluster; a new one waits to be bootstrapped (Bootstrap) or added by the leader.
//
// Restart: state.db is durable and records the last applied index, so Raft is told not
// to restore its latest snapshot when state.db is already at or after it; Raft then
// replays the log from the snapshot on, and the FSM skips every entry at or below its
// stored index. If state.db is behind the snapshot (or was lost), the snapshot is
// restored first. Either way no entry is lost and none is applied twice.
func Open(cfg Config, trans raft.Transport) (*Log, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if trans == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrBadConfig)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	hl := newRaftLogger(cfg.Logger)
	rc := raft.DefaultConfig()
	rc.LocalID = cfg.LocalID
	rc.Logger = hl
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true // lets concurrent proposals share a replication round
	if cfg.Raft != nil {
		cfg.Raft(rc)
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}

	// raft.db is checked before anything starts: Raft must never run on a log whose
	// entries changed (see integrity.go); a bad state.db is set aside by newFSM.
	if err := checkRaftFile(cfg.Dir); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	fsm, err := newFSM(cfg.Dir, cfg.Verify, cfg.Knobs)
	if err != nil {
		return nil, err
	}
	// bbolt's defaults with a timeout: a file another process holds is an error, not
	// a wait for ever.
	bo := *bolt.DefaultOptions
	bo.Timeout = 5 * time.Second
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.Dir, RaftFile), BoltOptions: &bo})
	if errors.Is(err, bolt.ErrTimeout) {
		err = fmt.Errorf("%s is in use by another process (is another baton running on this data dir?): %w", RaftFile, err)
	}
	if err != nil {
		fsm.Close()
		return nil, fmt.Errorf("open raft store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, cfg.SnapshotRetain, rc.Logger) // cfg.Raft may have given Raft its own logger
	if err != nil {
		store.Close()
		fsm.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	// Every byte Raft trusts is sealed (raftseal.go); a file from before is sealed now.
	// A seal that fails at run time halts the replica as a corrupt entry does: it
	// neither signs nor serves, and gives up Raft leadership, until repaired.
	halt := func(i uint64, err error) { fsm.raise(&FaultError{File: RaftFile, Index: i, Halted: true, Err: err}) }
	var sealedLogs raft.LogStore = sealedLogStore{LogStore: store, onCorrupt: halt}
	var sealedStable raft.StableStore = sealedStableStore{store}
	if cfg.Knobs != nil && cfg.Knobs.UnsealedRaftLog {
		sealedLogs, sealedStable = store, store // the simulator's old code: nothing sealed
	} else if err := sealRaftFile(store, cfg.Logger); err != nil {
		store.Close()
		fsm.Close()
		return nil, fmt.Errorf("open: %w", err)
	}
	has, err := raft.HasExistingState(sealedLogs, sealedStable, snaps)
	if err == nil && !has && fsm.View().AppliedIndex > 0 {
		err = fmt.Errorf("%w (state.db at index %d)", ErrInconsistentState, fsm.View().AppliedIndex)
	}
	if err != nil {
		store.Close()
		fsm.Close()
		return nil, fmt.Errorf("open: %w", err)
	}
	rc.NoSnapshotRestoreOnStart = stateCoversSnapshot(fsm, snaps)
	var hold holdState
	if cfg.Hold != nil {
		st, err := readStartState(sealedLogs, sealedStable, snaps)
		if err != nil {
			store.Close()
			fsm.Close()
			return nil, fmt.Errorf("open: %w", err)
		}
		if cfg.Hold(st) {
			hold.hold(rc)
		}
	}
	rf := &raftStoreFault{onChange: func() { fsm.notify.publish(nil) }}
	fsm.stored = newStoreTimes(cfg.Mono)
	var timed raft.LogStore = faultLogStore{LogStore: stages.LogStore{LogStore: sealedLogs, Who: fsm.who}, f: rf}
	if fsm.stored != nil {
		timed = timedLogStore{LogStore: timed, t: fsm.stored}
	}
	logs, err := raft.NewLogCache(512, snapPrevLogs{LogStore: timed, snaps: snaps})
	if err != nil {
		store.Close()
		fsm.Close()
		return nil, fmt.Errorf("log cache: %w", err)
	}
	trans, nt := wrapNotice(trans) // notice.go
	kn := knobs.Intentlog{}
	if cfg.Knobs != nil {
		kn = *cfg.Knobs
	}
	notices := nt
	if kn.BarrierNudges {
		notices = nil // acknowledgements noted and pipelines drained, but no notices sent
	}
	hdr := leaderHeader(rc, trans)
	var running atomic.Pointer[raft.Raft]
	if nt != nil {
		nt.early, nt.unacked = !kn.NoSendAhead, kn.EarlyUnacked
	}
	raftLogs := aheadLogStore{LogStore: logs, n: nt, off: kn.NoSendAhead, r: &running, header: hdr,
		before: kn.BeforeLeaderStore, pre: fsm.pre} // ahead.go
	r, err := raft.NewRaft(rc, fsm, rewriteGuard{LogStore: raftLogs, fsm: fsm, verify: cfg.Verify}, faultStableStore{StableStore: termHookStore{sealedStable, cfg.OnTerm}, f: rf}, snaps, trans)
	if err != nil {
		store.Close()
		fsm.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	running.Store(r)
	l := &Log{cfg: cfg, fsm: fsm, raft: r, store: store, snaps: snaps, raftFault: rf, notices: nt,
		log: cfg.Logger.With("component", "intentlog"), done: make(chan struct{})}
	l.hold.heartbeat, l.hold.elect = hold.heartbeat, hold.elect
	l.hold.held.Store(hold.held.Load())
	l.nudger = newNudger(r.LastIndex, func() {
		if !l.commitNotice(notices, hdr, logs) {
			_ = r.Barrier(nudgeTimeout).Error()
		}
	}, l.closed.Load, notices != nil)
	// The leader nudges when it applies an entry, not when the entry's proposer has
	// its answer: sooner (no wait for the proposer's goroutine), and also for an
	// entry whose proposer stopped waiting.
	nudge := func(data []byte, res Result) {
		if r.State() == raft.Leader {
			l.nudger.request(data, res)
		}
	}
	fsm.applied.Store(&nudge)
	go l.monitorHalt()
	if last, err := store.LastIndex(); err == nil && last > 0 {
		go l.snapshotAfterStart(last, rc.SnapshotThreshold)
	}
	return l, nil
}

// snapshotAfterStart takes a snapshot once the local log is applied (up to last, its
// last index at Open) if the log since the newest snapshot has reached the threshold.
// Raft only checks every SnapshotInterval (randomised up to twice that) from its
// start, so a device restarted more often than that never compacted its log: in a
// soak raft.db grew to 178 MB and a rejoining device received the whole log.
func (l *Log) snapshotAfterStart(last, threshold uint64) {
	// Raft's applied index (it counts no-ops and configurations, which the FSM
	// never sees), polled: a start-up event, not a hot path.
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for l.raft.AppliedIndex() < last {
		select {
		case <-t.C:
		case <-l.done:
			return
		}
	}
	var snapIndex uint64
	if metas, err := l.snaps.List(); err == nil && len(metas) > 0 {
		snapIndex = metas[0].Index // newest first
	}
	if applied := l.raft.AppliedIndex(); applied < snapIndex+threshold {
		return
	}
	if err := l.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !l.closed.Load() {
		l.log.Warn("snapshot after start failed", "err", err)
		return
	}
	l.log.Debug("snapshot after start", "previous_snapshot", snapIndex)
}

// haltStepDownEvery is how often a halted replica checks that it does not lead.
const haltStepDownEvery = 200 * time.Millisecond

// monitorHalt makes a halted replica give up Raft leadership, now and whenever it wins
// it again: a leader whose copy of an entry is corrupt would send that copy to
// followers that lack it, and it can apply nothing anyway. It still takes part in Raft
// otherwise (it stores and acknowledges entries), so the others keep their quorum.
func (l *Log) monitorHalt() {
	select {
	case <-l.fsm.haltCh:
	case <-l.done:
		return
	}
	fe := l.fsm.halted()
	if fe != nil {
		l.log.Error("the state machine halted", "err", fe)
	}
	t := time.NewTicker(haltStepDownEvery)
	defer t.Stop()
	for {
		if l.fsm.halted() != nil && l.raft.State() == raft.Leader {
			l.log.Warn("halted replica gives up Raft leadership")
			_ = l.raft.LeadershipTransfer().Error()
		}
		select {
		case <-t.C:
		case <-l.done:
			return
		}
	}
}

// Fault returns this replica's storage fault, or nil when it is healthy: a
// *FaultError naming the file (raft.db or state.db) and the index or key. A halting
// fault (corruption) is permanent until the device is repaired; a write fault clears
// once a write succeeds. See FaultError.
func (l *Log) Fault() error {
	if err := l.fsm.Fault(); err != nil {
		return err
	}
	return l.raftFault.get()
}

// stateCoversSnapshot reports whether the durable state is at or after the newest
// snapshot, so Raft need not restore it on start.
func stateCoversSnapshot(fsm *FSM, snaps raft.SnapshotStore) bool {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return false // nothing to restore (or let raft report the error)
	}
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return false
	}
	defer rc.Close()
	idx, err := SnapshotAppliedIndex(rc)
	if err != nil {
		return false
	}
	return fsm.View().AppliedIndex >= idx
}

// Bootstrap makes this node the first member of a new cluster with the given servers
// (usually just itself). It returns ErrAlreadyBootstrapped if any state exists.
func (l *Log) Bootstrap(servers []raft.Server) error {
	if l.closed.Load() {
		return ErrClosed
	}
	has, err := raft.HasExistingState(l.store, l.store, l.snaps)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if has || l.fsm.View().AppliedIndex > 0 {
		return ErrAlreadyBootstrapped
	}
	err = l.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return ErrAlreadyBootstrapped
	}
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// Propose appends e to the log through this node, which must be the leader, and
// returns the apply's Result once this node has applied it. It honours ctx: when the
// deadline passes first it returns ErrTimeout (the entry may still be applied later).
// Errors: ErrNotLeader, ErrLeadershipLost, ErrTimeout, ErrClosed, ErrEntryTooLarge.
func (l *Log) Propose(ctx context.Context, e Entry) (Result, error) {
	data, err := Encode(e)
	if err != nil {
		return Result{}, err
	}
	return l.apply(ctx, data)
}

// ApplyEncoded is Propose for an already-encoded entry (what a leader-side forwarding
// handler calls); it returns the Result encoded with EncodeResult. Bytes that do not
// decode are refused with ErrMalformed before they reach the log.
func (l *Log) ApplyEncoded(ctx context.Context, data []byte) ([]byte, error) {
	if len(data) > MaxEntryBytes {
		return nil, ErrEntryTooLarge
	}
	if _, err := Decode(data); err != nil {
		return nil, err
	}
	if data[0] != CodecVersion {
		// Older versions are replayed from logs that hold them, never proposed anew.
		return nil, fmt.Errorf("%w: entry of codec version %d: new entries are version %d", ErrMalformed, data[0], CodecVersion)
	}
	res, err := l.apply(ctx, data)
	if err != nil {
		return nil, err
	}
	return EncodeResult(res), nil
}

func (l *Log) apply(ctx context.Context, data []byte) (Result, error) {
	if l.closed.Load() {
		return Result{}, ErrClosed
	}
	if fe := l.fsm.halted(); fe != nil {
		return Result{}, fe
	}
	if len(data) > MaxEntryBytes {
		return Result{}, ErrEntryTooLarge
	}
	if l.raft.State() != raft.Leader {
		return Result{}, ErrNotLeader
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return Result{}, ErrTimeout
		}
	}
	stages.Mark(stages.RaftApply, 0, 0, l.fsm.who)
	fut := l.raft.Apply(data, timeout)
	if f, ok := ctx.Value(enqueuedKey{}).(func()); ok {
		f()
	}
	if done := ctx.Done(); done != nil {
		waited := make(chan struct{})
		go func() { _ = fut.Error(); close(waited) }()
		select {
		case <-waited:
		case <-done:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return Result{}, ErrTimeout
			}
			return Result{}, ctx.Err()
		}
	}
	if err := fut.Error(); err != nil {
		return Result{}, mapRaftErr(err)
	}
	stages.Mark(stages.RaftDone, fut.Index(), fut.Index(), l.fsm.who)
	if err, ok := fut.Response().(error); ok {
		return Result{}, err // this replica halted at (or before) the entry
	}
	res, ok := fut.Response().(Result)
	if !ok {
		return Result{}, fmt.Errorf("intentlog: unexpected apply response %T", fut.Response())
	}
	return res, nil
}

type enqueuedKey struct{}

// WithEnqueued returns a context that makes Propose and ApplyEncoded on this node
// call f once the entry has been handed to Raft's apply queue (before it is
// replicated, committed or applied; also when the hand-over failed): any entry this
// node proposes after f has run is appended after it, if both are appended in the
// same term. A forwarded proposal runs f on the leader only if the leader is this
// process. f must not block.
func WithEnqueued(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, enqueuedKey{}, f)
}

func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrTimeout
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	return fmt.Errorf("raft apply: %w", err)
}

// Leader returns the known leader's address and ID (empty when unknown).
func (l *Log) Leader() (raft.ServerAddress, raft.ServerID) { return l.raft.LeaderWithID() }

// View returns the locally applied hot state. It never blocks and never waits on Raft.
func (l *Log) View() View { return l.fsm.View() }

// StoredAt returns the reading of Config.Mono taken when this replica began writing
// log entry index to its Raft log, if it remembers one: only entries stored by this
// process, among the last few thousand indexes, and not replaced since (a deleted
// range, a restored snapshot). An entry's store time is after its proposal (it cannot
// be stored anywhere before it was proposed) and before its apply here. It never
// blocks on Raft.
func (l *Log) StoredAt(index uint64) (time.Duration, bool) { return l.fsm.stored.get(index) }

// Genesis returns the chain identity stored in the replicated state, if a genesis was
// applied. It reads local state; it does not wait on Raft.
func (l *Log) Genesis() (Genesis, bool) {
	g := l.fsm.View().Genesis
	return g, g.Index != 0
}

// Rejections returns the rejection counters by reason (a copy).
func (l *Log) Rejections() map[Reason]uint64 { return l.fsm.Rejections() }

// Pending returns the oldest pending intents, oldest first: at most maxCount of them
// and at most maxBytes of path+value bytes, except that the oldest one is always
// returned even if it alone is larger (so a large intent cannot wedge the chain).
// maxCount <= 0 or maxBytes <= 0 mean no limit. It reads local state; it does not wait
// on Raft.
func (l *Log) Pending(maxCount int, maxBytes int64) ([]Intent, error) {
	var out []Intent
	err := l.fsm.read(func(tx *bolt.Tx) error {
		var size int64
		c := tx.Bucket(bPending).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if maxCount > 0 && len(out) >= maxCount {
				break
			}
			p, err := l.fsm.openValue(bPending, k, v)
			if err != nil {
				return err
			}
			in, err := decodeIntentValue(p)
			if err != nil {
				return fmt.Errorf("pending %x: %w", k, err)
			}
			n := int64(len(in.Path) + len(in.Value))
			if maxBytes > 0 && len(out) > 0 && size+n > maxBytes {
				break
			}
			size += n
			out = append(out, in)
		}
		return nil
	})
	return out, err
}

// Record is one signed record.
type Record struct {
	Path  string
	Value []byte
}

// Record returns the signed value at path. Reserved keys (without '/') are never
// returned.
func (l *Log) Record(path string) (value []byte, ok bool, err error) {
	if !strings.Contains(path, "/") {
		return nil, false, nil
	}
	err = l.fsm.read(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bRecords).Get([]byte(path)); v != nil {
			p, err := l.fsm.openValue(bRecords, []byte(path), v)
			if err != nil {
				return err
			}
			value, ok = append([]byte{}, p...), true
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return value, ok, nil
}

// Records returns signed records whose path starts with prefix, in path order, at
// most limit of them (limit <= 0: all).
func (l *Log) Records(prefix string, limit int) ([]Record, error) {
	var out []Record
	err := l.fsm.read(func(tx *bolt.Tx) error {
		c := tx.Bucket(bRecords).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			if limit > 0 && len(out) >= limit {
				break
			}
			p, err := l.fsm.openValue(bRecords, k, v)
			if err != nil {
				return err
			}
			out = append(out, Record{Path: string(k), Value: append([]byte{}, p...)})
		}
		return nil
	})
	return out, err
}

// Commit returns the full encoding of the commit at seq, or ErrNotFound.
func (l *Log) Commit(seq uint64) ([]byte, error) {
	var raw []byte
	err := l.fsm.read(func(tx *bolt.Tx) error {
		v := tx.Bucket(bChain).Get(u64key(seq))
		if v == nil {
			return ErrNotFound
		}
		p, err := l.fsm.openValue(bChain, u64key(seq), v)
		if err != nil {
			return err
		}
		raw = append([]byte{}, p...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return raw, nil
}

// LeaseHistory returns the kept lease events, oldest first.
func (l *Log) LeaseHistory() ([]LeaseEvent, error) {
	var out []LeaseEvent
	err := l.fsm.read(func(tx *bolt.Tx) error {
		c := tx.Bucket(bHistory).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			p, err := l.fsm.openValue(bHistory, k, v)
			if err != nil {
				return err
			}
			r := &rbuf{b: p}
			ev := decodeLeaseEvent(r)
			if err := r.done(); err != nil {
				return fmt.Errorf("lease history %x: %w", k, err)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}

// Members returns the servers of the applied Raft configuration, sorted by ID.
func (l *Log) Members() ([]raft.Server, error) { return l.fsm.Members() }

// Members returns the servers of the applied Raft configuration, sorted by ID.
func (f *FSM) Members() ([]raft.Server, error) {
	var out []raft.Server
	err := f.read(func(tx *bolt.Tx) error {
		c := tx.Bucket(bMembers).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			p, err := f.openValue(bMembers, k, v)
			if err != nil {
				return err
			}
			r := &rbuf{b: p}
			s := raft.Server{ID: raft.ServerID(k), Suffrage: raft.ServerSuffrage(r.byte1()),
				Address: raft.ServerAddress(r.str())}
			if err := r.done(); err != nil {
				return fmt.Errorf("member %q: %w", k, err)
			}
			out = append(out, s)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// Watch returns a channel that is closed after the next applied transaction that
// moved the applied index or changed the state (a snapshot restore included), or when
// the Log is closed. It is a broadcast: every caller waiting on it wakes; the apply
// never waits for watchers. Take the channel before reading, then wait on it:
// changes between the read and the wait are not missed.
func (l *Log) Watch() <-chan struct{} { return l.fsm.notify.watchCh() }

// Subscribe returns a Subscription delivering typed events after they are applied. See
// Subscription for the delivery guarantee. Close it when done.
func (l *Log) Subscribe() *Subscription { return l.fsm.notify.subscribe() }

// Dump writes the canonical snapshot encoding of the local state (see FSM.Dump).
func (l *Log) Dump(w io.Writer) error { return l.fsm.Dump(w) }

// Raft returns the underlying Raft node (for membership changes, stats, snapshots).
func (l *Log) Raft() *raft.Raft { return l.raft }

// Close shuts Raft down, then closes the state and the Raft store. It is idempotent.
func (l *Log) Close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		close(l.done)
		// First stop the FSM's write retries: Shutdown waits for the apply, which a
		// full disk would otherwise block for good.
		l.fsm.beginClose()
		err := l.raft.Shutdown().Error()
		// Raft is stopped, so nothing applies any more: the state can be closed.
		err = errors.Join(err, l.fsm.Close(), l.store.Close())
		l.cerr = err
	})
	return l.cerr
}

// WaitApplied returns once the local replica has applied index (View().AppliedIndex >=
// index), or with ctx's error, or ErrClosed. It never proposes anything.
func (l *Log) WaitApplied(ctx context.Context, index uint64) error {
	for {
		w := l.Watch() // taken before the read, so no wakeup is missed
		if l.fsm.View().AppliedIndex >= index {
			return nil
		}
		if l.closed.Load() {
			return ErrClosed
		}
		if fe := l.fsm.halted(); fe != nil {
			return fe // it will never get there
		}
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Barrier waits until the leader has applied every entry committed before the call
// and returns its applied index; only the leader can answer (ErrNotLeader elsewhere).
// A follower that needs to be current (read-your-writes, or a claim decision) asks
// the leader for this index, through its forwarding layer, and then calls WaitApplied
// with it. Honours ctx like Propose.
func (l *Log) Barrier(ctx context.Context) (uint64, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	if fe := l.fsm.halted(); fe != nil {
		return 0, fe
	}
	if l.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return 0, ErrTimeout
		}
	}
	fut := l.raft.Barrier(timeout)
	errc := make(chan error, 1)
	go func() { errc <- fut.Error() }()
	select {
	case err := <-errc:
		if err != nil {
			return 0, mapRaftErr(err)
		}
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, ErrTimeout
		}
		return 0, ctx.Err()
	}
	return l.fsm.View().AppliedIndex, nil
}
