package intentlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// storeTimesSize bounds the memory of store times: the last this many log indexes (a
// slot of 16 bytes each). The lease asks for the time of an entry when its replica
// applies it, which is at most the entries in flight between the store and the apply
// later; an index that fell out of the ring simply has no time (the caller then counts
// from the apply, as without store times).
const storeTimesSize = 4096

// storeTimes remembers, for the last storeTimesSize log indexes this replica wrote to
// its Raft log in this process, a monotonic reading taken as the write began: the
// moment the entry was first stored here. It is never read by the apply (which reads
// no clock); the lease reads it (Log.StoredAt) to start counting how long a record has
// stood from when its entry reached this replica rather than from the later apply.
//
// A time must never belong to an entry other than the one at that index now: Raft
// replaces a follower's conflicting tail with DeleteRange then StoreLogs (the store
// overwrites the slot with the later time; the delete forgets it), and a snapshot
// install brings state whose entries this replica never stored (Restore forgets every
// time first). A store of an entry already present (Raft resends after a leader change)
// overwrites with the later time, which only delays a lapse. Entries replayed from disk
// at start were not stored by this process: they have no time.
type storeTimes struct {
	mono func() time.Duration

	mu  sync.Mutex
	idx [storeTimesSize]uint64 // 0: empty (Raft indexes start at 1)
	at  [storeTimesSize]time.Duration
}

func newStoreTimes(mono func() time.Duration) *storeTimes {
	if mono == nil {
		return nil
	}
	return &storeTimes{mono: mono}
}

// note records now as the store time of indexes lo..hi (the last storeTimesSize of
// them).
func (s *storeTimes) note(lo, hi uint64) {
	if s == nil || hi < lo {
		return
	}
	now := s.mono()
	lo = max(lo, hi-min(hi, storeTimesSize-1))
	s.mu.Lock()
	for i := lo; i <= hi; i++ {
		s.idx[i%storeTimesSize], s.at[i%storeTimesSize] = i, now
	}
	s.mu.Unlock()
}

// forget drops the times of indexes lo..hi.
func (s *storeTimes) forget(lo, hi uint64) {
	if s == nil || hi < lo {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if hi-lo >= storeTimesSize-1 {
		for k, i := range s.idx {
			if i >= lo && i <= hi {
				s.idx[k] = 0
			}
		}
		return
	}
	for i := lo; i <= hi; i++ {
		if s.idx[i%storeTimesSize] == i {
			s.idx[i%storeTimesSize] = 0
		}
	}
}

// clear drops every time.
func (s *storeTimes) clear() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.idx = [storeTimesSize]uint64{}
	s.mu.Unlock()
}

// get returns the store time of index, if remembered.
func (s *storeTimes) get(index uint64) (time.Duration, bool) {
	if s == nil || index == 0 {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx[index%storeTimesSize] != index {
		return 0, false
	}
	return s.at[index%storeTimesSize], true
}

// timedLogStore is a raft.LogStore that notes store times (see storeTimes): the time
// is taken before the write, so that it is the earliest moment the entry was here,
// and a failed write forgets it again.
type timedLogStore struct {
	raft.LogStore
	t *storeTimes
}

func (s timedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s timedLogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return s.LogStore.StoreLogs(logs)
	}
	lo, hi := logs[0].Index, logs[len(logs)-1].Index
	s.t.note(lo, hi)
	err := s.LogStore.StoreLogs(logs)
	if err != nil {
		s.t.forget(lo, hi)
	}
	return err
}

func (s timedLogStore) DeleteRange(lo, hi uint64) error {
	s.t.forget(lo, hi)
	return s.LogStore.DeleteRange(lo, hi)
}
