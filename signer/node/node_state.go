package node

import (
	"encoding/hex"
	"errors"
	"time"

	"github.com/batonhq/baton/election"
)

// State is a snapshot of the node for the state endpoint and embedders. Building it
// reads only local state (atomics and the applied view), never waiting on Raft, so it
// answers in milliseconds with no quorum.
type State struct {
	ID      string      `json:"id"`
	Name    string      `json:"name,omitempty"` // this device's human name (Config.Name)
	Chain   string      `json:"chain"`
	Signer  bool        `json:"signer"` // this device has the chain key
	Raft    RaftState   `json:"raft"`
	Lease   LeaseState  `json:"lease"`
	Head    HeadState   `json:"head"`
	Pending int         `json:"pending"`
	Bytes   int64       `json:"pending_bytes"`
	Members int         `json:"members"`
	Loop    LoopSummary `json:"loop"`
	// Healthy is false while this device must not sign (Health); Problem says why
	// and how to recover.
	Healthy bool   `json:"healthy"`
	Problem string `json:"problem,omitempty"`
	// ProblemKind names Problem's kind: "catching_up" (a restored or repaired device
	// that has not caught up), "diverged" (its history or state differs from the
	// others': the alarm), "storage", "identity" or "other".
	ProblemKind string `json:"problem_kind,omitempty"`
	// Defect is a fault of baton itself this device saw that does not stop it
	// signing (the first commit its loop signed that the apply refused for its
	// content; see Node.Defect): report it.
	Defect string `json:"defect,omitempty"`
	// SuspectedSkew reports that this device's wall clock disagreed with a lease
	// record it observed (see election.Stats.SkewSuspicions).
	SuspectedSkew bool   `json:"suspected_skew"`
	SkewReports   uint64 `json:"skew_reports"`
	// Clock: this device's stamps clamped because its wall clock ran ahead, and the
	// log time steps the apply cut short (see clockState). A clamp in the last hour
	// sets SuspectedSkew too.
	Clock ClockState `json:"clock"`
	// Quorum: whether this device reaches a Raft quorum, as far as it can tell.
	Quorum QuorumState `json:"quorum"`
	// Peers: every member of the Raft configuration with its reachability (Members
	// is its length).
	Peers []PeerState `json:"peers,omitempty"`
	// RemovedMembers: the devices removed (or that left) while this device was a
	// member, oldest removal first.
	RemovedMembers []RemovedMember `json:"removed_members,omitempty"`
	// Removed: this device left or was removed from the cluster (see Node.Removed);
	// its view of the lease and the chain is no longer kept up to date.
	Removed    bool   `json:"removed,omitempty"`
	RemovedHow string `json:"removed_how,omitempty"` // "left" or "removed"
	// Rejoin is set while this device, having lost Raft state it had (a repair, a
	// lost raft.db, a restored older copy), catches up and does not vote (fence.go).
	Rejoin *RejoinState `json:"rejoin,omitempty"`
}

// RaftState is the Raft part of State.
type RaftState struct {
	Role         string `json:"role"` // Leader, Follower, Candidate, Shutdown
	Leader       string `json:"leader"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"` // the FSM's (state.db)
	LastIndex    uint64 `json:"last_index"`
	// LastContactMs is how long ago the leader was last heard from (0 on the leader,
	// -1 if never).
	LastContactMs int64 `json:"last_contact_ms"`
}

// LeaseState is the lease part of State.
type LeaseState struct {
	Holder string `json:"holder"`
	Epoch  uint64 `json:"epoch"`
	TS     int64  `json:"ts"`
	TTLMs  int64  `json:"ttl_ms"`
	// ExpiresInMs is when the lease ends as this device's policy sees it (for another
	// holder: when this device may claim it; for its own hold: when its may-sign
	// window closes); 0 when free or lapsed.
	ExpiresInMs int64 `json:"expires_in_ms"`
	HeldByMe    bool  `json:"held_by_me"` // this device holds it and may sign now
	Free        bool  `json:"free"`       // free as far as this device can tell
}

// HeadState is the chain head part of State.
type HeadState struct {
	Seq    uint64 `json:"seq"`
	Hash   string `json:"hash"` // hex, "" for an empty chain
	Epoch  uint64 `json:"epoch"`
	Signer string `json:"signer"`
}

// LoopSummary is the signer loop part of State.
type LoopSummary struct {
	CommitsSigned   uint64 `json:"commits_signed"`
	CommitsAccepted uint64 `json:"commits_accepted"`
	CommitsRejected uint64 `json:"commits_rejected"`
	// SignedRefused counts commits this device signed that will never apply (0 in
	// fault-free operation; under faults at most the commits in flight when a hold
	// ended).
	SignedRefused uint64 `json:"signed_refused"`
	// Queued and InFlight: submissions waiting at this holder, and its commits
	// proposed and not yet applied here (0 on a quiet device).
	Queued         int       `json:"queued"`
	InFlight       int       `json:"in_flight"`
	ProposeErrors  uint64    `json:"propose_errors"`
	LastSigned     uint64    `json:"last_signed"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
	LastErrorAgeMs int64     `json:"last_error_age_ms,omitempty"` // how long ago LastError happened
	LeaseClaims    uint64    `json:"lease_claims"`
	LeaseRenews    uint64    `json:"lease_renews"`
	LeaseLostRaces uint64    `json:"lease_lost_races"`
	// Bumps: moves of this device's hold to the next epoch after a refused commit.
	// CommitsRefused: commits the apply refused for their content, by reason (a
	// defect but for backlog; see State.Defect).
	Bumps          uint64            `json:"bumps"`
	CommitsRefused map[string]uint64 `json:"commits_refused,omitempty"`
}

// NameOf returns the name of member id as st knows it ("" when unknown).
func (st State) NameOf(id string) string {
	if id == st.ID {
		return st.Name
	}
	for _, p := range st.Peers {
		if p.ID == id {
			return p.Name
		}
	}
	return ""
}

// State returns the node's state. It never blocks on Raft.
func (n *Node) State() State {
	r := n.log.Raft()
	v := n.log.View()
	st := State{ID: n.ID(), Name: n.cfg.Name, Chain: n.cfg.Chain, Signer: n.cfg.ChainKey != nil,
		Pending: v.Pending, Bytes: v.PendingBytes, Healthy: true}
	if err := n.Health(); err != nil {
		st.Healthy, st.Problem, st.ProblemKind = false, err.Error(), problemKind(err)
	}
	if err := n.Defect(); err != nil {
		st.Defect = err.Error()
	}
	_, lid := r.LeaderWithID()
	st.Raft = RaftState{Role: r.State().String(), Leader: string(lid), Term: r.CurrentTerm(),
		CommitIndex: r.CommitIndex(), AppliedIndex: v.AppliedIndex, LastIndex: r.LastIndex(), LastContactMs: -1}
	if st.Raft.Role == "Leader" {
		st.Raft.LastContactMs = 0
	} else if lc := r.LastContact(); !lc.IsZero() {
		st.Raft.LastContactMs = time.Since(lc).Milliseconds()
	}
	l := v.Lease
	st.Lease = LeaseState{Holder: l.Holder, Epoch: l.Epoch, TS: l.TS, TTLMs: l.TTL,
		HeldByMe: n.loop != nil && n.loop.HoldingIn(v)} // as of v: held only with a record naming this device
	d := n.lease.Decide()
	if l.Holder != "" {
		st.Lease.ExpiresInMs = d.ExpiresIn().Milliseconds()
	}
	st.Lease.Free = l.Holder == "" || d.Action == election.Claim
	st.Head = HeadState{Seq: v.Head.Seq, Epoch: v.Head.Epoch, Signer: v.Head.Signer}
	if v.Head.Seq > 0 {
		st.Head.Hash = hex.EncodeToString(v.Head.Hash[:])
	}
	if ms, err := n.log.Members(); err == nil {
		st.Members = len(ms)
	}
	if ps, err := n.Peers(); err == nil && ps != nil {
		st.Peers, st.Members = ps, len(ps) // one source for the count and the list
	}
	st.Quorum = n.quorum(st.Peers)
	st.RemovedMembers = n.RemovedMembers()
	if how, _, ok := n.RemovedHow(); ok {
		st.Removed, st.RemovedHow = true, how
	}
	st.Rejoin = n.fence.state(v.AppliedIndex)
	es := n.lease.Stats()
	st.Loop.LeaseClaims, st.Loop.LeaseRenews, st.Loop.LeaseLostRaces = es.Claims, es.Renews, es.LostRaces
	st.SkewReports = es.SkewSuspicions
	st.SuspectedSkew = d.SuspectedSkew
	st.Clock = clockState(v, es, n.cfg.Clock.Now())
	if n.signsAtproto() {
		st.Clock.Cluster = n.clusterClock()
	}
	st.SuspectedSkew = st.SuspectedSkew || st.Clock.Suspect
	if n.loop != nil {
		ls := n.loop.Stats()
		st.Loop.CommitsSigned, st.Loop.SignedRefused = ls.CommitsSigned, ls.SignedRefused
		st.Loop.Queued, st.Loop.InFlight = ls.Queued, ls.InFlight
		st.Loop.CommitsAccepted, st.Loop.CommitsRejected = ls.CommitsAccepted, ls.CommitsRejected
		st.Loop.ProposeErrors, st.Loop.LastSigned = ls.ProposeErrors, ls.LastSigned
		st.Loop.Bumps = ls.Bumps
		for r, v := range ls.ContentRefused {
			if st.Loop.CommitsRefused == nil {
				st.Loop.CommitsRefused = map[string]uint64{}
			}
			st.Loop.CommitsRefused[string(r)] = v
		}
		st.Loop.LastError, st.Loop.LastErrorAt = ls.LastError, ls.LastErrorAt
		if !ls.LastErrorAt.IsZero() {
			st.Loop.LastErrorAgeMs = max(time.Since(ls.LastErrorAt).Milliseconds(), 1)
		}
	}
	return st
}

// problemKind is State.ProblemKind for Health's error.
func problemKind(err error) string {
	switch {
	case errors.Is(err, ErrCatchingUp):
		return "catching_up"
	case errors.Is(err, ErrDiverged):
		return "diverged"
	case errors.Is(err, ErrStorage):
		return "storage"
	case errors.Is(err, ErrIdentity):
		return "identity"
	case errors.Is(err, ErrClone):
		return "clone"
	}
	return "other"
}
