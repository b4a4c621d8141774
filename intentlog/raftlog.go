package intentlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// RaftEntry is one entry of a device's Raft log, decoded: what a checker reads to see
// every proposal a replica stored, including those the apply refused and those Raft
// later truncated (while they are still there).
type RaftEntry struct {
	Index uint64
	Term  uint64
	// AppendedAt is when the leader that created the entry appended it (its wall
	// clock; raft.Log.AppendedAt). For attribution in reports only.
	AppendedAt time.Time
	// Entry is the decoded command; nil for Raft's own entries (configuration,
	// no-op, barrier) and for command bytes that do not decode (the apply rejects
	// those as malformed).
	Entry Entry
}

// ForEachEntry calls fn for every entry in this node's Raft log store with an index
// at or above from, in index order, while the node runs. Entries compacted away by a
// snapshot are not there to read: the first index read may be above from. Raft keeps
// writing while this reads; an entry truncated under it is skipped. fn's error stops
// the walk and is returned. ErrClosed after Close.
func (l *Log) ForEachEntry(from uint64, fn func(RaftEntry) error) error {
	if l.closed.Load() {
		return ErrClosed
	}
	err := forEachEntry(l.store, from, fn)
	if err != nil && l.closed.Load() {
		return ErrClosed
	}
	return err
}

// ReadRaftLog is ForEachEntry over the Raft log of a device that is not running: it
// opens dir's raft.db read-only (a running node holds the file's lock; ReadRaftLog
// then fails after a second rather than wait).
//
// A damaged file (truncated, torn pages) is an error wrapping ErrCorrupt, never a
// panic or a memory fault of the caller.
func ReadRaftLog(dir string, from uint64, fn func(RaftEntry) error) error {
	return guarded(func() error {
		o := &bolt.Options{ReadOnly: true, Timeout: time.Second}
		g := guardOpen(o)
		defer g.release()
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, RaftFile), BoltOptions: o})
		g.owned = err == nil
		if err != nil {
			return fmt.Errorf("open %s read-only: %w", filepath.Join(dir, RaftFile), err)
		}
		defer store.Close()
		return forEachEntry(store, from, fn)
	})
}

// forEachEntry walks s from max(from, first index) to its last index.
func forEachEntry(s raft.LogStore, from uint64, fn func(RaftEntry) error) error {
	first, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("raft log first index: %w", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		return fmt.Errorf("raft log last index: %w", err)
	}
	if first == 0 { // empty log
		return nil
	}
	for i := max(from, first); i <= last; i++ {
		var rl raft.Log // fresh each time: the decoded entry may alias its Data
		if err := s.GetLog(i, &rl); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue // compacted or truncated under us
			}
			return fmt.Errorf("raft log entry %d: %w", i, err)
		}
		re := RaftEntry{Index: rl.Index, Term: rl.Term, AppendedAt: rl.AppendedAt}
		if rl.Type == raft.LogCommand {
			if e, err := Decode(rl.Data); err == nil {
				re.Entry = e
			}
		}
		if err := fn(re); err != nil {
			return err
		}
	}
	return nil
}
