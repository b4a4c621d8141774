package intentlog

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The campaign hold (issue 38 item 1). hashicorp/raft counts a candidate's own vote
// without a message: a replica whose configuration names only itself becomes leader
// with no RequestVote sent, so a guard in the transport never sees that election. A
// replica whose stores went back in time (a restored backup from before the others
// joined) would lead alone and commit what the cluster never saw.
//
// Config.Hold decides, from what Raft will start from and before Raft runs, whether
// Raft starts held: a held follower takes every message (a leader's entries, the
// snapshots it installs, the votes asked of it) but never becomes a candidate, since
// its heartbeat and election timeouts are set beyond any run's length; the only other
// way into candidacy, a leader's TimeoutNow, is for the transport's guard to refuse.
// Log.Unhold puts the configured timeouts back.

// HoldTimeout is a held replica's Raft heartbeat and election timeout: longer than any
// run, so that its follower never times out into a candidacy.
const HoldTimeout = 1000 * time.Hour

// StartState is what Raft starts from, read from the stores before it runs.
type StartState struct {
	// LastIndex is the last index Raft holds (its log's, else its newest snapshot's).
	LastIndex uint64
	// Term is the current term in the stable store.
	Term uint64
	// Voters are the latest configuration's voters, in its order (nil: none yet).
	Voters []raft.ServerID
}

// OnlyVoter reports whether the latest configuration names id as its one voter.
func (s StartState) OnlyVoter(id raft.ServerID) bool {
	return len(s.Voters) == 1 && s.Voters[0] == id
}

// readStartState reads what Raft will start from: the stored term, the last index and
// the latest configuration (the newest configuration entry after the newest snapshot,
// else the snapshot's own), as hashicorp/raft's NewRaft finds them.
func readStartState(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (StartState, error) {
	var s StartState
	term, err := stable.GetUint64(keyCurrentTerm)
	if err != nil && err.Error() != "not found" { // raft-boltdb's ErrKeyNotFound, as raft.HasExistingState compares it
		return s, fmt.Errorf("read the current term: %w", err)
	}
	s.Term = term
	var snap *raft.SnapshotMeta
	metas, err := snaps.List()
	if err != nil {
		return s, fmt.Errorf("list snapshots: %w", err)
	}
	if len(metas) > 0 {
		snap = metas[0] // newest first
		s.LastIndex = snap.Index
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return s, fmt.Errorf("read the log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return s, fmt.Errorf("read the log's last index: %w", err)
	}
	s.LastIndex = max(s.LastIndex, last)
	low := first
	if snap != nil {
		low = max(low, snap.Index+1)
	}
	for i := last; i >= low && i > 0; i-- {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				break
			}
			return s, fmt.Errorf("read log entry %d: %w", i, err)
		}
		if e.Type == raft.LogConfiguration {
			s.Voters = voters(raft.DecodeConfiguration(e.Data))
			return s, nil
		}
	}
	if snap != nil && len(snap.Configuration.Servers) > 0 {
		s.Voters = voters(snap.Configuration)
	}
	return s, nil
}

func voters(c raft.Configuration) []raft.ServerID {
	var out []raft.ServerID
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, s.ID)
		}
	}
	return out
}

// holdState is the Log's side of the hold: the timeouts to put back.
type holdState struct {
	held             atomic.Bool
	heartbeat, elect time.Duration // set once, by Open, before the Log is shared
}

// hold sets rc's timeouts to HoldTimeout, keeping the configured ones for Unhold.
func (h *holdState) hold(rc *raft.Config) {
	h.heartbeat, h.elect = rc.HeartbeatTimeout, rc.ElectionTimeout
	rc.HeartbeatTimeout, rc.ElectionTimeout = HoldTimeout, HoldTimeout
	h.held.Store(true)
}

// Unhold lets a held Raft campaign again: its configured heartbeat and election
// timeouts are put back. A no-op when not held.
func (l *Log) Unhold() error {
	if !l.hold.held.Load() {
		return nil
	}
	rc := l.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = l.hold.heartbeat, l.hold.elect
	if err := l.raft.ReloadConfig(rc); err != nil {
		return fmt.Errorf("unhold: %w", err)
	}
	l.hold.held.Store(false)
	return nil
}

// RaftTimeouts returns the configured Raft heartbeat and election timeouts (while
// held, the ones Unhold puts back, not HoldTimeout).
func (l *Log) RaftTimeouts() (heartbeat, election time.Duration) {
	if l.hold.held.Load() {
		return l.hold.heartbeat, l.hold.elect
	}
	rc := l.raft.ReloadableConfig()
	return rc.HeartbeatTimeout, rc.ElectionTimeout
}
