package sim

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Event is one line of a run's recent history: a fault, a lease change seen by a
// device, a hold starting or ending, a signature, a proposal of a lease entry or a
// commit, an applied commit, a Raft leader change.
type Event struct {
	At     time.Duration // virtual time since the run started
	Dev    int           // device index, -1 for the simulator itself
	Kind   string
	Detail string
}

func (e Event) String() string {
	who := "sim "
	if e.Dev >= 0 {
		who = fmt.Sprintf("dev%d", e.Dev)
	}
	return fmt.Sprintf("%9.3fs %s %-9s %s", e.At.Seconds(), who, e.Kind, e.Detail)
}

// eventRing keeps the last cap events of a run (a bounded ring) and the violations.
type eventRing struct {
	mu    sync.Mutex
	start time.Time
	buf   []Event
	next  int
	total int
	trace func(Event) // optional: every event as it happens
}

const (
	ringSize       = 4096 // events kept (a failed run's files have them all)
	eventsInReport = 60   // events printed before a violation
)

func newEventRing(start time.Time, trace func(Event)) *eventRing {
	return &eventRing{start: start, buf: make([]Event, 0, ringSize), trace: trace}
}

func (r *eventRing) now() time.Duration { return time.Since(r.start) }

func (r *eventRing) add(dev int, kind, format string, args ...any) {
	e := Event{At: r.now(), Dev: dev, Kind: kind, Detail: fmt.Sprintf(format, args...)}
	r.mu.Lock()
	if len(r.buf) < ringSize {
		r.buf = append(r.buf, e)
	} else {
		r.buf[r.next] = e
	}
	r.next = (r.next + 1) % ringSize
	r.total++
	trace := r.trace
	r.mu.Unlock()
	if trace != nil {
		trace(e)
	}
}

// recent returns up to n of the latest events, oldest first.
func (r *eventRing) recent(n int) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []Event
	if len(r.buf) < ringSize {
		all = append(all, r.buf...)
	} else {
		all = append(append(all, r.buf[r.next:]...), r.buf[:r.next]...)
	}
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}

// Violation kinds: what an invariant found.
const (
	// Chains.
	VFork        = "fork"            // two devices (or one device over time) hold different commits at one seq
	VInvalid     = "invalid_chain"   // the chain's format (chain.NewStepper, incrementally) refused the applied chain
	VEquivocate  = "equivocation"    // the chain key signed two different commits for one (seq, epoch)
	VRefusedCalm = "refused_calm"    // a signed commit was refused in a schedule without faults
	VUnsigned    = "unknown_commit"  // an applied commit the recording key never signed
	VDuplicate   = "duplicate_op"    // an intent ID appears twice in the chain (a retry applied twice)
	VLost        = "lost_ack"        // an acknowledged intent is not in the converged chain
	VAckMismatch = "ack_mismatch"    // two acknowledgements of one ID name different Raft indexes
	VClientError = "client_error"    // Submit failed with an error a client cannot retry
	VEpochReuse  = "epoch_reused"    // two holders at one epoch, or lease epochs going back
	VLiveTake    = "live_take"       // a claim (not a steal) replaced another holder's record younger than its TTL
	VOverlap     = "hold_overlap"    // two devices held the lease (Holds) at one virtual instant, no steal involved
	VLiveness    = "liveness"        // after the faults stopped, no holder signed within the bound
	VConverge    = "no_convergence"  // after the faults stopped, devices did not converge
	VPanic       = "panic"           // the simulated code panicked
	VLeak        = "goroutine_stuck" // a device did not shut down
)

// Violation is one invariant failure with the context to replay it.
type Violation struct {
	Kind   string
	At     time.Duration // virtual time since the run started
	Dev    int           // the device it concerns, -1 if none
	Detail string
	Events []Event // the recent events when it was found
}

// Report formats v for a person: seed, virtual time, what, the replay command, and
// the events that led up to it.
func (v Violation) Report(cfg Config) string {
	var b strings.Builder
	dev := ""
	if v.Dev >= 0 {
		dev = fmt.Sprintf(" dev%d", v.Dev)
	}
	fmt.Fprintf(&b, "VIOLATION %s seed=%d t=%.3fs%s: %s\n", v.Kind, cfg.Seed, v.At.Seconds(), dev, v.Detail)
	fmt.Fprintf(&b, "  replay: %s\n", cfg.ReplayCommand())
	if len(v.Events) > 0 {
		fmt.Fprintf(&b, "  the %d events before it:\n", len(v.Events))
		for _, e := range v.Events {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}
