package testnet

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/signer/node"
)

// growthEvery is the finest spacing of the chain-growth series: enough for the
// zoomed timelines, small enough for an hour-long soak's report.
const growthEvery = 50 * time.Millisecond

// recorder samples every running, unpaused device and builds the timeline: lease
// holds (spans per device and epoch), Raft leader marks, the chain's growth and when
// each seq was first seen applied.
type recorder struct {
	// devices reports every device's state now; st is nil while a device is down or
	// paused (a frozen process answers nothing).
	devices func() []sampled
	every   time.Duration
	// onHold, optional, is told when a device starts holding the lease.
	onHold func(device string, epoch uint64)

	mu      sync.Mutex
	events  []Event
	holds   []Span
	open    map[string]*Span // device -> its open hold span
	leader  map[string]bool  // device -> was leader at the last sample
	leaders []Mark
	growth  []Point
	// growthFrom is when the last growth point's stretch began: a busy stretch is
	// thinned into one point per growthEvery from there (measured from the point
	// itself, which moves, a chain growing at every sample stayed one point).
	growthFrom time.Time
	maxSeq     uint64
	maxEpoch   uint64
	seen       map[uint64]time.Time // seq -> first seen applied
	epochAt    map[uint64]time.Time // epoch -> a commit of it first seen applied
}

// sampled is one device's state at a sample.
type sampled struct {
	name string
	st   *node.State
}

func newRecorder(every time.Duration, devices func() []sampled) *recorder {
	if every == 0 {
		every = DefaultSampleEvery
	}
	return &recorder{devices: devices, every: every, open: map[string]*Span{}, leader: map[string]bool{},
		seen: map[uint64]time.Time{}, epochAt: map[uint64]time.Time{}}
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
		held   bool
		epoch  uint64
		leader bool
		seq    uint64
		head   uint64 // head epoch
	}
	var all []obs
	for _, d := range r.devices() {
		o := obs{name: d.name}
		if st := d.st; st != nil {
			o.held, o.epoch = st.Lease.HeldByMe, st.Lease.Epoch
			o.leader = st.Raft.Role == raft.Leader.String()
			o.seq, o.head = st.Head.Seq, st.Head.Epoch
		}
		all = append(all, o)
	}
	var started []obs
	r.mu.Lock()
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
			started = append(started, o)
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
			r.maxEpoch = max(r.maxEpoch, o.head)
			r.sawEpoch(o.head, now)
			p := Point{At: now, Seq: o.seq, Epoch: r.maxEpoch}
			if n := len(r.growth); n > 0 && now.Sub(r.growthFrom) < growthEvery && r.growth[n-1].Epoch == p.Epoch &&
				(n < 2 || r.growth[n-2].Epoch == p.Epoch) {
				r.growth[n-1] = p // thin a busy stretch; an epoch change stays a point of its own
			} else {
				r.growth = append(r.growth, p)
				r.growthFrom = now
			}
		}
	}
	r.mu.Unlock()
	if r.onHold != nil {
		for _, o := range started {
			r.onHold(o.name, o.epoch)
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
		r.sawEpoch(ac.Epoch, now)
		r.mu.Unlock()
	}
}

// sawEpoch notes a commit of epoch applied at t (r.mu held).
func (r *recorder) sawEpoch(epoch uint64, t time.Time) {
	if epoch == 0 {
		return
	}
	if at, ok := r.epochAt[epoch]; !ok || t.Before(at) {
		r.epochAt[epoch] = t
	}
}

// firstCommit returns when a commit of epoch was first seen applied.
func (r *recorder) firstCommit(epoch uint64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.epochAt[epoch]
	return t, ok
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

// fill copies the timeline into rep (open spans end now) and derives the devices'
// down and paused spans from the events.
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
	rep.Downs = append(rep.Downs, downSpans(r.events, now)...)
}

// downSpans pairs each device's going down (kill, stop, leave) or freezing (pause)
// with its coming back (restart, join; resume).
func downSpans(events []Event, end time.Time) []DeviceSpan {
	var out []DeviceSpan
	open := map[string]*DeviceSpan{}
	for _, e := range events {
		if e.Device == "" {
			continue
		}
		switch e.Kind {
		case EventKill, EventStop, EventLeave, EventPause:
			if _, ok := open[e.Device]; ok {
				continue // already down (a paused device then killed stays one span)
			}
			st := SpanDown
			switch e.Kind {
			case EventPause:
				st = SpanPaused
			case EventLeave:
				st = SpanLeft
			}
			open[e.Device] = &DeviceSpan{Device: e.Device, State: st, From: e.At, Cause: e.Label}
		case EventRestart, EventJoin, EventResume:
			if sp, ok := open[e.Device]; ok {
				sp.To = e.At
				out = append(out, *sp)
				delete(open, e.Device)
			}
		}
	}
	for _, sp := range open {
		sp.To = end
		out = append(out, *sp)
	}
	return out
}
