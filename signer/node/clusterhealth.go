package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// callHealth asks a member for its MemberHealth (ClusterHealth).
const callHealth byte = 9

// MemberHealth is one member's health as it reports it (ClusterHealth): what its
// State says of itself, or why it could not be asked.
type MemberHealth struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"` // the name it gives (Config.Name)
	Voter bool   `json:"voter"`
	Self  bool   `json:"self,omitempty"`
	// Healthy: the member answered and its Health is nil.
	Healthy bool `json:"healthy"`
	// Reached: the member answered (false: Problem says why not).
	Reached     bool   `json:"reached"`
	Problem     string `json:"problem,omitempty"`
	ProblemKind string `json:"problem_kind,omitempty"` // State.ProblemKind, or "unreachable"
	Role        string `json:"role,omitempty"`         // Raft's: Leader, Follower, Candidate
	Term        uint64 `json:"term,omitempty"`
	Applied     uint64 `json:"applied_index,omitempty"`
	HeadSeq     uint64 `json:"head_seq,omitempty"`
	Holder      bool   `json:"holder,omitempty"` // it holds the lease, as it sees it
	TookMs      int64  `json:"took_ms"`          // the ask's round trip (0 for this device)
}

// ClusterHealth asks every member of the Raft configuration for its health, at once
// and within ctx (etcdctl endpoint health --cluster): this device's own, and each
// other member's answer or why it gave none. Sorted by ID.
func (n *Node) ClusterHealth(ctx context.Context) ([]MemberHealth, error) {
	ms, err := n.log.Members()
	if err != nil {
		return nil, err
	}
	out := make([]MemberHealth, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		id, voter := string(m.ID), m.Suffrage == raft.Voter
		if id == n.id {
			out[i] = n.ownHealth()
			out[i].Self, out[i].Voter = true, voter
			continue
		}
		wg.Go(func() {
			start := time.Now()
			h := MemberHealth{ID: id, Voter: voter}
			b, err := n.net.Call(ctx, id, []byte{callHealth})
			if err == nil {
				err = json.Unmarshal(b, &h)
			}
			h.ID, h.Voter, h.TookMs = id, voter, time.Since(start).Milliseconds()
			if err != nil {
				h = MemberHealth{ID: id, Name: n.NameOf(id), Voter: voter, ProblemKind: "unreachable", TookMs: h.TookMs,
					Problem: fmt.Sprintf("could not ask it: %v", err)}
			} else {
				h.Reached = true
			}
			out[i] = h
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b MemberHealth) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// ownHealth is this device's MemberHealth.
func (n *Node) ownHealth() MemberHealth {
	st := n.State()
	return MemberHealth{ID: n.id, Name: n.cfg.Name, Healthy: st.Healthy, Reached: true, Problem: st.Problem, ProblemKind: st.ProblemKind,
		Role: st.Raft.Role, Term: st.Raft.Term, Applied: st.Raft.AppliedIndex, HeadSeq: st.Head.Seq,
		Holder: st.Lease.Holder == n.id}
}

// handleHealth answers a member's callHealth.
func (n *Node) handleHealth() ([]byte, error) { return json.Marshal(n.ownHealth()) }
