// Package stages is an off-by-default latency trace of the commit path: cheap
// timestamps at the stages one submission goes through (API decode, the hand-off to
// the signer loop, the signature, the proposal, Raft's log write on each replica, the
// apply on each replica, the answer). `baton bench` turns it on for a few sequential
// one-client rounds and prints where the time of one signed intent goes.
//
// While no Recorder is started, Mark is one atomic load: it may stay on the hot path
// of production code. Nothing here is read by the apply: it only records.
package stages

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stage is a point on the commit path.
type Stage uint8

// The stages, in the order one submission at the holder (which leads Raft) passes
// them. Lo/Hi of a Mark are 0 for the stages before the Raft index is known (one
// client at a time: the round is the only one in flight), else the Raft indexes the
// event covers.
const (
	ClientSend  Stage = iota // the bench client calls Submit (Go API) or sends the request (socket)
	APIStart                 // the socket API's handler runs (HTTP parsed)
	APIDecoded               // the request body is decoded and validated
	SubmitStart              // Node.Submit entered
	Queued                   // the signer loop queued the submission (Loop.Add)
	SignStart                // the signer built the commit and starts signing it
	Signed                   // chain.Sign returned
	RaftApply                // the leader hands the encoded entry to raft.Apply
	StoreStart               // a replica's Raft log write begins (Lo..Hi), Who: the replica
	StoreEnd                 // that write (with its fsync) returned
	ApplyStart               // a replica's FSM ApplyBatch begins (Lo..Hi), Who: the replica
	Verified                 // the apply verified a commit's signature (Lo: its index)
	ApplyEnd                 // that ApplyBatch committed its state transaction
	RaftDone                 // raft.Apply's future returned on the leader (Lo: the index)
	Answered                 // the signer loop answered the submission's ticket
	SubmitDone               // Node.Submit returns
	APIAnswered              // the socket API writes the response
	ClientDone               // the bench client has the answer
	NumStages
)

var names = [NumStages]string{"client send", "api start", "api decoded", "submit start", "queued",
	"sign start", "signed", "raft apply", "store start", "store end", "apply start", "verified",
	"apply end", "raft done", "answered", "submit done", "api answered", "client done"}

func (s Stage) String() string {
	if s < NumStages {
		return names[s]
	}
	return "?"
}

// Event is one mark.
type Event struct {
	Stage  Stage
	Lo, Hi uint64        // Raft indexes covered (0: not known at this stage)
	Who    uintptr       // the replica (its FSM or log store pointer), 0 for the holder's own stages
	At     time.Duration // since the Recorder started (monotonic)
}

// Recorder keeps the marks made while it is started, up to its capacity.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ev    []Event
	max   int
}

var cur atomic.Pointer[Recorder]

// Start starts recording (replacing any recorder running) and returns the recorder.
// At most max events are kept.
func Start(max int) *Recorder {
	r := &Recorder{start: time.Now(), max: max, ev: make([]Event, 0, min(max, 1<<16))}
	cur.Store(r)
	return r
}

// Stop stops recording and returns the events recorded.
func (r *Recorder) Stop() []Event {
	cur.CompareAndSwap(r, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.ev...)
}

// On reports whether a recorder runs.
func On() bool { return cur.Load() != nil }

// Mark records stage s (indexes lo..hi, replica who) when a recorder runs.
func Mark(s Stage, lo, hi uint64, who uintptr) {
	r := cur.Load()
	if r == nil {
		return
	}
	at := time.Since(r.start)
	r.mu.Lock()
	if len(r.ev) < r.max {
		r.ev = append(r.ev, Event{Stage: s, Lo: lo, Hi: hi, Who: who, At: at})
	}
	r.mu.Unlock()
}
