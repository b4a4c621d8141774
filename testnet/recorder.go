package testnet

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/signer/node"
)

// recorder samples every running, unpaused device and builds the timeline: lease
// holds (spans per device and epoch), Raft leader marks, the chain's growth and when
// each seq was first seen applied.
type recorder struct {
	// devices reports every device's state now; st is nil while a device is down or
	// paused (a frozen process answers nothing).
	devices func() []sampled
	every   time.Duration

	mu      sync.Mutex
	events  []Event
	holds   []Span
	open    map[string]*Span // device -> its open hold span
	leader  map[string]bool  // device -> was leader at the last sample
	leaders []Mark
	growth  []Point
	maxSeq  uint64
	seen    map[uint64]time.Time
}

// sampled is one device's state at a sample.
type sampled struct {
	name string
	st   *node.State
}

func newRecorder(every time.Duration, devices func() []sampled) *recorder {
	return &recorder{devices: devices, every: every, open: map[string]*Span{}, leader: map[string]bool{}, seen: map[uint64]time.Time{}}
}

func (r *recorder) run(ctx context.Context) {
	tk := time.NewTicker(r.every)
	defer tk.Stop()
	for {
		r.sample()
		select {
		case <-ctx.Done():
			r.closeAll(time.Now())
			return
		case <-tk.C:
		}
	}
}

func (r *recorder) sample() {
	now := time.Now()
	type obs struct {
		name   string
		up     bool
		held   bool
		epoch  uint64
		leader bool
		seq    uint64
	}
	var all []obs
	for _, d := range r.devices() {
		o := obs{name: d.name}
		if st := d.st; st != nil {
			o.up, o.held, o.epoch = true, st.Lease.HeldByMe, st.Lease.Epoch
			o.leader = st.Raft.Role == raft.Leader.String()
			o.seq = st.Head.Seq
		}
		all = append(all, o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range all {
		sp := r.open[o.name]
		if sp != nil && (!o.held || sp.Epoch != o.epoch) {
			sp.To = now
			r.holds = append(r.holds, *sp)
			delete(r.open, o.name)
			sp = nil
		}
		if o.held && sp == nil {
			r.open[o.name] = &Span{Device: o.name, Epoch: o.epoch, From: now, To: now}
		}
		if o.leader && !r.leader[o.name] {
			r.leaders = append(r.leaders, Mark{Device: o.name, At: now})
		}
		r.leader[o.name] = o.leader
		if o.seq > r.maxSeq {
			for s := r.maxSeq + 1; s <= o.seq; s++ {
				if _, ok := r.seen[s]; !ok {
					r.seen[s] = now // a follower normally got there first
				}
			}
			r.maxSeq = o.seq
			r.growth = append(r.growth, Point{At: now, Seq: o.seq})
		}
	}
}

// follow records when each commit is applied on n (more precise than sampling);
// it returns when ctx is done or the node's log closes.
func (r *recorder) follow(ctx context.Context, n *node.Node) {
	for ac := range n.Commits(ctx, 1, true) {
		if ac.Err != nil {
			return
		}
		now := time.Now()
		r.mu.Lock()
		if t, ok := r.seen[ac.Seq]; !ok || now.Before(t) {
			r.seen[ac.Seq] = now
		}
		r.mu.Unlock()
	}
}

func (r *recorder) closeAll(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, sp := range r.open {
		sp.To = now
		r.holds = append(r.holds, *sp)
		delete(r.open, name)
	}
}

func (r *recorder) event(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) observed() map[uint64]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint64]time.Time, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// fill copies the timeline into rep (open spans end now).
func (r *recorder) fill(rep *Report) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Events = append(rep.Events, r.events...)
	rep.Holds = append(rep.Holds, r.holds...)
	for _, sp := range r.open {
		s := *sp
		s.To = now
		rep.Holds = append(rep.Holds, s)
	}
	rep.Leaders = append(rep.Leaders, r.leaders...)
	rep.Growth = append(rep.Growth, r.growth...)
}
