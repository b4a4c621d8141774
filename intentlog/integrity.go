package intentlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// Start-time integrity. Open checks both bbolt files before Raft starts, because a torn
// or truncated file is otherwise found the hard way: bbolt maps the file into memory,
// and reading a page the file no longer has kills the process with SIGBUS. The checks
// run in a goroutine of their own with debug.SetPanicOnFault(true), so such a read
// becomes a recovered panic and an error.
//
//   - state.db is a checkpoint that can be rebuilt: a bad one (truncated, torn, failing
//     bbolt's consistency check) is set aside as state.db.corrupt(.N) and the state is
//     rebuilt from the latest snapshot and the log.
//   - raft.db is the durable record and cannot be rebuilt locally: a bad one makes Open
//     fail with a *CorruptFileError naming the file, the first bad index and the way
//     out (Repair, which `baton repair` runs).

// CorruptFileError is what Open returns when raft.db fails its start-time check. It
// unwraps to ErrCorrupt.
type CorruptFileError struct {
	File  string // RaftFile
	Index uint64 // the first log index found bad (0: the file's structure is bad)
	Err   error
}

func (e *CorruptFileError) Error() string {
	where := "its structure"
	if e.Index > 0 {
		where = fmt.Sprintf("log entry %d", e.Index)
	}
	return fmt.Sprintf("%s: %s is corrupt: %v; to recover, with the device stopped, run `baton repair --data DIR` on its data dir: it sets aside this device's Raft log and state, keeps its Raft term and vote, and the device re-syncs from the other members when it starts", e.File, where, e.Err)
}

func (e *CorruptFileError) Unwrap() error { return e.Err }

// repairTemp is the new raft.db that Repair writes before it swaps it in. If it is
// found, a repair was interrupted: Open refuses and Repair finishes the job.
const repairTemp = RaftFile + ".repair-new"

// guarded runs fn in a goroutine of its own that turns memory faults (a read of a page a
// truncated file no longer has) and panics (bbolt on a torn page) into ErrCorrupt.
func guarded(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		debug.SetPanicOnFault(true)
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("%w: reading the file failed: %v", ErrCorrupt, r)
			}
		}()
		done <- fn()
	}()
	return <-done
}

// openGuard makes a failed bbolt open leave no lock behind. bbolt takes the file's
// lock early in Open and, on some damaged files (a page past the end of a cut file),
// panics after it mapped the file; the panic is recovered (guarded), but the lock
// would stay held in the process (the map keeps the file open even once it is
// closed), and the next open of that file in this process (an embedder retrying
// node.New after the repair) would wait for ever (docs/DRILLS.md, seed 680274).
type openGuard struct {
	f     *os.File
	owned bool // set once Open returned: the database owns the file
}

// guardOpen has o's opens remembered; defer release before the open.
func guardOpen(o *bolt.Options) *openGuard {
	g := &openGuard{}
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		g.f = f
		return f, err
	}
	return g
}

// release unlocks and closes the file unless the open succeeded. A file bbolt closed
// itself (an open that returned an error) is harmless to unlock and close again. The
// map of a panicked open stays (memory, not the lock).
func (g *openGuard) release() {
	if !g.owned && g.f != nil {
		unlockFile(g.f)
		g.f.Close()
	}
}

// checkBolt checks the bbolt file at path: that it opens (its meta pages and its
// freelist load), that it is at least as large as the database it describes (else it
// was truncated), that every page of every bucket reads, and bbolt's consistency check.
// Then it calls more, if set, with the file still open read-only. Problems with the
// file wrap ErrCorrupt; not being able to look at it (in use, permissions) does not.
//
// The order matters: bbolt's own check runs in a goroutine of bbolt's, where a panic
// on a damaged page could not be recovered; so every page is first read here, in the
// guarded goroutine, and only then is the check run.
func checkBolt(path string, more func(db *bolt.DB) error) error {
	return guarded(func() error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		o := &bolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: 2 * time.Second}
		g := guardOpen(o)
		defer g.release()
		db, err := bolt.Open(path, 0o600, o)
		g.owned = err == nil
		if errors.Is(err, bolt.ErrTimeout) {
			return fmt.Errorf("%s is in use by another process", filepath.Base(path))
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		defer db.Close()
		err = db.View(func(tx *bolt.Tx) error {
			if need := tx.Size(); fi.Size() < need {
				return fmt.Errorf("%w: the file is %d bytes but its database needs %d (truncated)", ErrCorrupt, fi.Size(), need)
			}
			if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				return b.ForEach(func(k, v []byte) error { return nil }) // touches every page
			}); err != nil {
				return fmt.Errorf("%w: %v", ErrCorrupt, err)
			}
			var first error
			for err := range tx.Check() { // drain: the check runs until it is done
				if first == nil {
					first = err
				}
			}
			if first != nil {
				return fmt.Errorf("%w: consistency check: %v", ErrCorrupt, first)
			}
			return nil
		})
		if err == nil && more != nil {
			err = more(db)
		}
		return err
	})
}

// checkStateFile sets a bad state.db aside (it is rebuilt). A missing one is fine.
func checkStateFile(path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	err := checkBolt(path, nil)
	if errors.Is(err, ErrCorrupt) {
		if _, serr := setAside(path, "corrupt"); serr != nil {
			return fmt.Errorf("set aside a corrupt %s (%v): %w", filepath.Base(path), err, serr)
		}
		return nil
	}
	return err
}

// checkRaftFile checks raft.db: the bbolt structure, and that every log entry decodes,
// sits under its own index, and (for the entries of this package's codec version 2)
// verifies its checksum. A missing file is fine (a new node).
func checkRaftFile(dir string) error {
	path := filepath.Join(dir, RaftFile)
	if _, err := os.Stat(filepath.Join(dir, repairTemp)); err == nil {
		return fmt.Errorf("%s: found %s: a repair was interrupted; run baton repair again", path, repairTemp)
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var sealed bool
	err := checkBolt(path, func(db *bolt.DB) (err error) { sealed, err = checkStableBucket(db); return err })
	if err == nil {
		snap := latestSnapshotIndex(dir)
		err = guarded(func() error { return checkRaftEntries(path, snap, sealed) })
	}
	var ce *CorruptFileError
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, ErrCorrupt) {
		return &CorruptFileError{File: RaftFile, Err: err}
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", RaftFile, err)
	}
	return nil
}

// latestSnapshotIndex is the index of the snapshot Raft starts from: the newest (by
// term, index, ID, as raft's FileSnapshotStore orders them) under dir/snapshots whose
// meta reads, of a version raft understands; 0 if none. Read by hand: opening raft's
// FileSnapshotStore creates the directory and writes a permission probe, and this
// check runs before anything may write.
func latestSnapshotIndex(dir string) uint64 {
	ents, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		return 0
	}
	var best *raft.SnapshotMeta
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "snapshots", e.Name(), "meta.json"))
		if err != nil {
			continue
		}
		var m raft.SnapshotMeta
		if json.Unmarshal(b, &m) != nil || m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
			continue
		}
		if best == nil || m.Term > best.Term || m.Term == best.Term && (m.Index > best.Index || m.Index == best.Index && m.ID > best.ID) {
			best = &m
		}
	}
	if best == nil {
		return 0
	}
	return best.Index
}

// checkRaftEntries reads every log entry of the raft.db at path through raft-boltdb
// (read-only), as Raft will. An entry missing at or below snap (the latest snapshot's
// index) is not a fault: Raft starts from the snapshot and never reads it, and it
// leaves such gaps itself. A follower whose log is behind when it installs the
// leader's snapshot keeps its old entries (compacted only up to its own last index
// minus TrailingLogs) and appends the leader's after the snapshot's index, with
// nothing in between (seed 4334 of testnet/sim: entries 292-419 and 571-671 around
// a snapshot at 570).
//
// Every entry's seal (raftseal.go) is verified: required when the file is sealed.
func checkRaftEntries(path string, snap uint64, sealed bool) error {
	o := &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second}
	g := guardOpen(o)
	defer g.release()
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: o})
	g.owned = err == nil
	if err != nil {
		return fmt.Errorf("%w: open: %v", ErrCorrupt, err)
	}
	defer store.Close()
	first, err := store.FirstIndex()
	if err != nil {
		return fmt.Errorf("%w: first index: %v", ErrCorrupt, err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return fmt.Errorf("%w: last index: %v", ErrCorrupt, err)
	}
	if first == 0 {
		return nil // no entries (all compacted into snapshots, or none yet)
	}
	bad := func(i uint64, format string, args ...any) error {
		return &CorruptFileError{File: RaftFile, Index: i, Err: fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))}
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		l = raft.Log{}
		if err := store.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				if i <= snap {
					continue // under the snapshot Raft starts from: never read
				}
				return bad(i, "missing (the log has entries %d to %d; the latest snapshot is at %d)", first, last, snap)
			}
			return bad(i, "does not decode: %v", err)
		}
		if err := checkEntrySeal(&l, sealed); err != nil {
			return &CorruptFileError{File: RaftFile, Index: i, Err: err}
		}
		if l.Index != i {
			return bad(i, "holds the entry of index %d", l.Index)
		}
		switch l.Type {
		case raft.LogCommand:
			if _, err := Decode(l.Data); errors.Is(err, ErrCorrupt) {
				return bad(i, "%v", err)
			}
		case raft.LogConfiguration:
			if err := decodesAsConfiguration(l.Data); err != nil {
				return bad(i, "configuration does not decode: %v", err)
			}
		}
	}
	return nil
}

// decodesAsConfiguration reports whether raft can decode data (raft panics otherwise).
func decodesAsConfiguration(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	raft.DecodeConfiguration(data)
	return nil
}

// Repair prepares the data directory dir of a device whose raft.db (or state) is
// corrupt to resync from the other members: it deletes the Raft log and the state
// (state.db and the snapshots) and keeps Raft's stable store, the current term and
// the vote, so the device never votes twice in a term. On its next start the device
// has no log: the leader sends it a snapshot (or the whole log) and it catches up.
// The old raft.db is kept beside, as raft.db.corrupt(.N), for inspection. The device
// must not be running (Repair fails if raft.db is in use). Repair is safe to run again
// after an interruption: it finishes an interrupted swap.
//
// Repair refuses when it cannot read the stable store: without the term and vote the
// device could vote twice in a term. Such a device must be removed from the cluster
// and join again as a new member.
func Repair(dir string) error {
	path := filepath.Join(dir, RaftFile)
	temp := filepath.Join(dir, repairTemp)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if _, terr := os.Stat(temp); terr == nil {
			// Interrupted between setting the old file aside and the swap.
			if err := os.Rename(temp, path); err != nil {
				return fmt.Errorf("repair: finish the swap: %w", err)
			}
			syncDir(dir)
			return removeState(dir)
		}
		return fmt.Errorf("repair: %s: no %s", dir, RaftFile)
	}
	stable, err := readStable(path)
	if err != nil {
		return fmt.Errorf("repair: cannot read Raft's stable store (current term and vote) from %s: %w; "+
			"without them this device could vote twice in a term: remove it from the cluster and join it again as a new member", path, err)
	}
	if err := removeIfExists(temp); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	if err := writeStable(temp, stable); err != nil {
		_ = removeIfExists(temp)
		return fmt.Errorf("repair: write the new %s: %w", RaftFile, err)
	}
	// The state first: a crash after this and before the swap leaves the old raft.db,
	// which fails its check again, and the repair is run again.
	if err := removeState(dir); err != nil {
		return err
	}
	if _, err := setAside(path, "corrupt"); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	if err := os.Rename(temp, path); err != nil {
		return fmt.Errorf("repair: swap in the new %s: %w", RaftFile, err)
	}
	syncDir(dir)
	return nil
}

// readStable copies Raft's stable store (the conf bucket: CurrentTerm, LastVoteTerm,
// LastVoteCand) out of a raft.db, byte for byte.
func readStable(path string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := guarded(func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
		if errors.Is(err, bolt.ErrTimeout) {
			return fmt.Errorf("%s is in use: stop the device first", RaftFile)
		}
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("conf")) // raft-boltdb's stable store bucket
			if b == nil {
				return errors.New("no stable store bucket")
			}
			return b.ForEach(func(k, v []byte) error {
				out[string(k)] = append([]byte{}, v...)
				return nil
			})
		})
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("the stable store is empty")
	}
	if err := checkStableValues(out); err != nil {
		return nil, err
	}
	return out, nil
}

// writeStable creates a raft.db at path holding only the given stable store.
func writeStable(path string, stable map[string][]byte) error {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return err
	}
	for k, v := range stable { // order does not matter: one key each
		if err := store.Set([]byte(k), v); err != nil {
			store.Close()
			return err
		}
	}
	if err := store.Sync(); err != nil {
		store.Close()
		return err
	}
	return store.Close()
}

// removeState deletes the applied state and the snapshots of dir.
func removeState(dir string) error {
	for _, name := range []string{StateFile, CleanFile, StateFile + ".restore"} {
		if err := removeIfExists(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
		return fmt.Errorf("repair: remove snapshots: %w", err)
	}
	syncDir(dir)
	return nil
}
