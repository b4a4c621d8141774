package stages

import "github.com/hashicorp/raft"

// LogStore marks Raft's log writes (StoreStart, StoreEnd) of replica Who in the trace:
// the leader's append and each follower's. baton's replicas and the bench's raw Raft
// baseline wrap their stores with it, so the two traces compare segment by segment.
type LogStore struct {
	raft.LogStore
	Who uintptr
}

// StoreLogs marks the write of logs around the wrapped store's.
func (s LogStore) StoreLogs(logs []*raft.Log) error {
	if !On() || len(logs) == 0 {
		return s.LogStore.StoreLogs(logs)
	}
	lo, hi := logs[0].Index, logs[len(logs)-1].Index
	Mark(StoreStart, lo, hi, s.Who)
	err := s.LogStore.StoreLogs(logs)
	Mark(StoreEnd, lo, hi, s.Who)
	return err
}
