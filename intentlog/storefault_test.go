package intentlog

import (
	"errors"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

type failingLogStore struct {
	raft.LogStore
	err error
}

func (s failingLogStore) StoreLogs([]*raft.Log) error { return s.err }

// A failed raft.db write (Raft's own log) is a write fault of the Log until the next
// write succeeds: without it a follower on a full disk stalls while it looks healthy.
func TestRaftStoreWriteFault(t *testing.T) {
	woke := 0
	f := &raftStoreFault{onChange: func() { woke++ }}
	s := faultLogStore{LogStore: failingLogStore{LogStore: raft.NewInmemStore(), err: syscall.ENOSPC}, f: f}
	if err := s.StoreLogs([]*raft.Log{{Index: 1}}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	var fe *FaultError
	if err := f.get(); !errors.As(err, &fe) || fe.File != RaftFile || fe.Halted || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fault after a failed append: %v", err)
	}
	ok := faultLogStore{LogStore: raft.NewInmemStore(), f: f}
	if err := ok.StoreLogs([]*raft.Log{{Index: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := f.get(); err != nil || woke != 2 {
		t.Fatalf("fault after a good append: %v (woke %d)", err, woke)
	}
}
