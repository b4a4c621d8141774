package intentlog

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Raft writes its log and its term and vote to raft.db (raft-boltdb) itself: when a
// write there fails (a full disk, an I/O error) Raft only logs it and refuses the
// append, and the replica stalls while everything it applied looks fine. These
// wrappers turn such a failure into a write fault of the Log (Fault), cleared by the
// next write that succeeds, so the node stops signing and says why.

// raftStoreFault holds the current raft.db write fault.
type raftStoreFault struct {
	fault atomic.Pointer[FaultError]
	// onChange is called after the fault was raised or cleared (wakes watchers).
	onChange func()
}

func (s *raftStoreFault) note(err error) {
	if err != nil {
		s.fault.Store(&FaultError{File: RaftFile, Err: err})
		s.onChange()
		return
	}
	if s.fault.Load() != nil {
		s.fault.Store(nil)
		s.onChange()
	}
}

func (s *raftStoreFault) get() error {
	if fe := s.fault.Load(); fe != nil {
		return fe
	}
	return nil
}

// faultLogStore is a raft.LogStore that reports write failures.
type faultLogStore struct {
	raft.LogStore
	f *raftStoreFault
}

func (s faultLogStore) StoreLog(l *raft.Log) error {
	err := s.LogStore.StoreLog(l)
	s.f.note(err)
	return err
}

func (s faultLogStore) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	s.f.note(err)
	return err
}

func (s faultLogStore) DeleteRange(min, max uint64) error {
	err := s.LogStore.DeleteRange(min, max)
	s.f.note(err)
	return err
}

// faultStableStore is a raft.StableStore that reports write failures (reads, and
// their "not found" error text, which raft matches, pass unchanged).
type faultStableStore struct {
	raft.StableStore
	f *raftStoreFault
}

func (s faultStableStore) Set(k, v []byte) error {
	err := s.StableStore.Set(k, v)
	s.f.note(err)
	return err
}

func (s faultStableStore) SetUint64(k []byte, v uint64) error {
	err := s.StableStore.SetUint64(k, v)
	s.f.note(err)
	return err
}

// termHookStore calls onTerm (if set) with a term before Raft stores it as its current
// term (Config.OnTerm).
type termHookStore struct {
	raft.StableStore
	onTerm func(uint64)
}

// keyCurrentTerm is the key hashicorp/raft stores its current term under.
var keyCurrentTerm = []byte("CurrentTerm")

func (s termHookStore) SetUint64(k []byte, v uint64) error {
	if s.onTerm != nil && string(k) == string(keyCurrentTerm) {
		s.onTerm(v)
	}
	return s.StableStore.SetUint64(k, v)
}
