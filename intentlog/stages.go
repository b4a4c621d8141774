package intentlog

import (
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/internal/stages"
)

// The latency trace's hooks (package stages, off by default): each replica marks its
// Raft log writes and its applies with its own number, so that a trace tells the
// leader's from the followers'.

var replicaSeq atomic.Uintptr

// stageLogStore marks Raft's log writes (the leader's append and each follower's).
type stageLogStore struct {
	raft.LogStore
	who uintptr
}

func (s stageLogStore) StoreLogs(logs []*raft.Log) error {
	if !stages.On() || len(logs) == 0 {
		return s.LogStore.StoreLogs(logs)
	}
	lo, hi := logs[0].Index, logs[len(logs)-1].Index
	stages.Mark(stages.StoreStart, lo, hi, s.who)
	err := s.LogStore.StoreLogs(logs)
	stages.Mark(stages.StoreEnd, lo, hi, s.who)
	return err
}

// markingVerifier marks every commit verification of replica who.
func markingVerifier(v CommitVerifier, who uintptr) CommitVerifier {
	if v == nil {
		return nil
	}
	return func(raw []byte) (CommitInfo, error) {
		info, err := v(raw)
		stages.Mark(stages.Verified, 0, 0, who)
		return info, err
	}
}
