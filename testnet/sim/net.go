package sim

import (
	"container/heap"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The simulated network: one directed link per ordered pair of devices, each a queue
// of messages with a delivery time in virtual time. A link delays (base + jitter),
// loses, duplicates and, unless FIFO, reorders; a cut link drops everything (a
// partition, one-way when only one direction is cut). Forwarded proposals can be
// delayed further than Raft's messages on the same link (late proposals: a slow
// stream on a multiplexed connection).
//
// Each device has one endpoint per incarnation. A message is addressed to the
// endpoint that was current when it was sent: if that incarnation died meanwhile (a
// crash), the message is dropped, as a TCP connection to a dead process would be.
// A paused endpoint (SIGSTOP) sends nothing (its messages are dropped: the stopped
// process never wrote them) and holds what arrives (the kernel buffers it) until it
// resumes, when the held messages are delivered in arrival order.

// msgClass tells Raft's messages from the node's forwarded proposals (for delays and
// statistics).
type msgClass uint8

const (
	classRaft    msgClass = iota // Raft RPCs and their answers
	classForward                 // forwarded proposals and barriers to the leader
	classAnswer                  // answers to forwarded proposals
	numClasses
)

// linkFaults are one directed link's current faults. The zero value is a perfect
// link; network.setDefault gives every link a small base delay.
type linkFaults struct {
	Delay, Jitter time.Duration // one-way delay: Delay + U[0, Jitter)
	Loss, Dup     float64       // probabilities per message
	Reorder       bool          // deliver by due time only (not FIFO)
	Cut           bool          // drop everything (partition)
	FwdDelay      time.Duration // forwarded requests: + FwdDelay*U[1-FwdSpread, 1+FwdSpread)
	FwdSpread     float64       // 0 means 0.5
	RaftDelay     time.Duration // Raft RPCs and answers only: + RaftDelay (a replica that lags while forwards go through)
	RaftCut       bool          // drop Raft RPCs and answers only (forwards go through)
}

type message struct {
	due     time.Time
	seq     uint64
	cls     msgClass
	dst     *endpoint
	deliver func(dst *endpoint)
}

type msgHeap []*message

func (h msgHeap) Len() int { return len(h) }
func (h msgHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h msgHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *msgHeap) Push(x any)   { *h = append(*h, x.(*message)) }
func (h *msgHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

type link struct {
	from, to int
	rng      *rand.Rand // per link, seeded from the run's seed: draws do not depend on other links' traffic
	f        linkFaults
	q        msgHeap
	// FIFO per class: no message is due before the previous one of its class (Raft's
	// messages and forwarded proposals are separate streams on one connection: a
	// slow stream does not hold the others up).
	last [numClasses]time.Time
	seq  uint64
	wake chan struct{}
}

// endpoint is one incarnation of a device on the network.
type endpoint struct {
	dev    int
	addr   raft.ServerAddress
	dead   chan struct{} // closed when the incarnation dies
	raftIn chan raft.RPC // Raft's consumer channel

	// guarded by network.mu
	// serve handles a forwarded request: set (setServe) once the node exists, after
	// its Raft has started and others may already be forwarding to it.
	serve  func(from int, req fwdRequest, reply func(fwdAnswer))
	isDead bool
	paused bool
	held   []*message
}

// NetStats counts messages by class.
type NetStats struct {
	Sent, Delivered, Dropped, Duplicated, Held [numClasses]uint64
	DroppedCut, DroppedLoss, DroppedDown       uint64
}

type network struct {
	mu    sync.Mutex
	n     int
	links [][]*link
	eps   []*endpoint // current endpoint per device; nil while down
	// clones: a second process with a device's identity (faults_clone.go), nil
	// mostly; cloneRoute[from][to]: device from's connection to device to reaches
	// to's clone, not the original.
	clones     []*endpoint
	cloneRoute [][]bool
	def        linkFaults
	closed     bool
	done       chan struct{}
	wg         sync.WaitGroup
	stats      NetStats
}

func newNetwork(seed int64, n int, def linkFaults) *network {
	nw := &network{n: n, eps: make([]*endpoint, n), clones: make([]*endpoint, n), cloneRoute: make([][]bool, n),
		def: def, done: make(chan struct{})}
	nw.links = make([][]*link, n)
	for a := range n {
		nw.cloneRoute[a] = make([]bool, n)
		nw.links[a] = make([]*link, n)
		for b := range n {
			if a == b {
				continue
			}
			l := &link{from: a, to: b, f: def, wake: make(chan struct{}, 1),
				rng: rand.New(rand.NewPCG(uint64(seed), uint64(0x11<<32|a<<16|b)))}
			nw.links[a][b] = l
			nw.wg.Add(1)
			go nw.runLink(l)
		}
	}
	return nw
}

// attach makes ep the current endpoint of its device.
func (nw *network) attach(ep *endpoint) {
	nw.mu.Lock()
	nw.eps[ep.dev] = ep
	nw.mu.Unlock()
}

// attachClone makes ep, a second process with device ep.dev's identity, reachable
// from the devices in from (their connections to that identity reach it); the
// others still reach the original.
func (nw *network) attachClone(ep *endpoint, from []int) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.clones[ep.dev] = ep
	for _, o := range from {
		nw.cloneRoute[o][ep.dev] = true
	}
}

// routeLocked is the endpoint device from's connection to device to reaches (nil
// while down).
func (nw *network) routeLocked(from *endpoint, to int) *endpoint {
	if c := nw.clones[to]; c != nil && from != nil && nw.cloneRoute[from.dev][to] {
		return c
	}
	return nw.eps[to]
}

// setServe installs ep's handler of forwarded requests.
func (nw *network) setServe(ep *endpoint, serve func(from int, req fwdRequest, reply func(fwdAnswer))) {
	nw.mu.Lock()
	ep.serve = serve
	nw.mu.Unlock()
}

// serveOf is ep's handler of forwarded requests (nil before setServe: the request is lost).
func (nw *network) serveOf(ep *endpoint) func(from int, req fwdRequest, reply func(fwdAnswer)) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return ep.serve
}

// kill ends ep's incarnation: everything in flight to it or held for it is lost.
func (nw *network) kill(ep *endpoint) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if ep.isDead {
		return
	}
	ep.isDead = true
	ep.held = nil
	close(ep.dead)
	if nw.eps[ep.dev] == ep {
		nw.eps[ep.dev] = nil
	}
	if nw.clones[ep.dev] == ep {
		nw.clones[ep.dev] = nil
		for o := range nw.n {
			nw.cloneRoute[o][ep.dev] = false
		}
	}
}

// pause freezes ep: it sends nothing and holds what arrives.
func (nw *network) pause(ep *endpoint) {
	nw.mu.Lock()
	ep.paused = true
	nw.mu.Unlock()
}

// resume unfreezes ep and delivers what it held, in order.
func (nw *network) resume(ep *endpoint) {
	nw.mu.Lock()
	ep.paused = false
	held := ep.held
	ep.held = nil
	nw.mu.Unlock()
	if len(held) == 0 {
		return
	}
	nw.wg.Add(1)
	go func() {
		defer nw.wg.Done()
		for _, m := range held {
			nw.arrive(m)
		}
	}()
}

// setLink replaces the faults of link from->to.
func (nw *network) setLink(from, to int, f linkFaults) {
	nw.mu.Lock()
	nw.links[from][to].f = f
	nw.mu.Unlock()
}

// updateLink changes the faults of link from->to in place.
func (nw *network) updateLink(from, to int, change func(*linkFaults)) {
	nw.mu.Lock()
	change(&nw.links[from][to].f)
	nw.mu.Unlock()
}

// heal puts every link back to the default faults.
func (nw *network) heal() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for a := range nw.n {
		for b := range nw.n {
			if a != b {
				nw.links[a][b].f = nw.def
			}
		}
	}
}

// current is the endpoint device from's connection to device dev reaches (nil while
// down).
func (nw *network) current(from *endpoint, dev int) *endpoint {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.routeLocked(from, dev)
}

// send queues a message from ep to device to's current endpoint; deliver runs at the
// destination when it arrives (unless it is lost on the way).
func (nw *network) send(from *endpoint, to int, cls msgClass, deliver func(dst *endpoint)) {
	nw.sendTo(from, nil, to, cls, deliver)
}

// sendTo is send to one particular endpoint (an answer goes back to the incarnation
// that asked, not to a later one).
func (nw *network) sendTo(from, dst *endpoint, to int, cls msgClass, deliver func(dst *endpoint)) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.stats.Sent[cls]++
	if dst == nil {
		dst = nw.routeLocked(from, to)
	}
	switch {
	case nw.closed || from.isDead || from.paused || dst == nil || dst.isDead || from.dev == to:
		nw.stats.Dropped[cls]++
		nw.stats.DroppedDown++
		return
	}
	l := nw.links[from.dev][to]
	if l.f.Cut || (l.f.RaftCut && cls == classRaft) {
		nw.stats.Dropped[cls]++
		nw.stats.DroppedCut++
		return
	}
	if l.f.Loss > 0 && l.rng.Float64() < l.f.Loss {
		nw.stats.Dropped[cls]++
		nw.stats.DroppedLoss++
		return
	}
	copies := 1
	if l.f.Dup > 0 && l.rng.Float64() < l.f.Dup {
		copies = 2
		nw.stats.Duplicated[cls]++
	}
	now := time.Now()
	for range copies {
		d := l.f.Delay
		if l.f.Jitter > 0 {
			d += time.Duration(l.rng.Int64N(int64(l.f.Jitter)))
		}
		if cls == classRaft {
			d += l.f.RaftDelay
		}
		if cls == classForward && l.f.FwdDelay > 0 {
			spread := l.f.FwdSpread
			if spread == 0 {
				spread = 0.5
			}
			d += time.Duration((1 - spread + 2*spread*l.rng.Float64()) * float64(l.f.FwdDelay))
		}
		due := now.Add(d)
		if !l.f.Reorder && due.Before(l.last[cls]) {
			due = l.last[cls]
		}
		if due.After(l.last[cls]) {
			l.last[cls] = due
		}
		l.seq++
		heap.Push(&l.q, &message{due: due, seq: l.seq, cls: cls, dst: dst, deliver: deliver})
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// runLink delivers l's messages at their due times, one at a time, in due order (a
// delivery that blocks, Raft's consumer being busy, holds the link up like a full
// TCP window).
func (nw *network) runLink(l *link) {
	defer nw.wg.Done()
	var timer *time.Timer
	for {
		nw.mu.Lock()
		if nw.closed {
			nw.mu.Unlock()
			return
		}
		var next *message
		wait := time.Duration(-1)
		if len(l.q) > 0 {
			if d := time.Until(l.q[0].due); d <= 0 {
				next = heap.Pop(&l.q).(*message)
			} else {
				wait = d
			}
		}
		nw.mu.Unlock()
		if next != nil {
			nw.arrive(next)
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-tc:
		case <-l.wake:
		case <-nw.done:
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (nw *network) arrive(m *message) {
	nw.mu.Lock()
	dst := m.dst
	switch {
	case nw.closed || dst.isDead:
		nw.stats.Dropped[m.cls]++
		nw.stats.DroppedDown++
		nw.mu.Unlock()
		return
	case dst.paused:
		dst.held = append(dst.held, m)
		nw.stats.Held[m.cls]++
		nw.mu.Unlock()
		return
	}
	nw.stats.Delivered[m.cls]++
	nw.mu.Unlock()
	m.deliver(dst)
}

// lastDue is when the last message now on its way arrives (now if none): faults
// that delayed messages are not over until they have arrived.
func (nw *network) lastDue() time.Time {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	last := time.Now()
	for _, row := range nw.links {
		for _, l := range row {
			if l == nil {
				continue
			}
			for _, m := range l.q {
				if m.due.After(last) {
					last = m.due
				}
			}
		}
	}
	return last
}

func (nw *network) close() {
	nw.mu.Lock()
	if nw.closed {
		nw.mu.Unlock()
		return
	}
	nw.closed = true
	close(nw.done)
	nw.mu.Unlock()
	nw.wg.Wait()
}

func (nw *network) statsCopy() NetStats {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.stats
}
