package intentlog

import (
	"sync/atomic"

	"github.com/batonhq/baton/internal/stages"
)

// The latency trace's hooks (package stages, off by default): each replica marks its
// Raft log writes and its applies with its own number, so that a trace tells the
// leader's from the followers'.

var replicaSeq atomic.Uintptr

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
