package node

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
)

// Peer clocks: on an atproto chain, a commit's rev is a timestamp, and a relay refuses
// a repository whose rev is more than 5 minutes in the future. Revs only go up (rev =
// max(clock, prev rev + 1)), so one commit signed by a fast clock holds every later rev
// there until the true time catches up. A holder cannot tell from its own clock that it
// is fast, nor from the log: log time starts at the genesis writer's clock (a fast
// genesis writer set it minutes ahead in the simulator's future_rev seeds) and holders'
// stamps move it.
//
// So every member answers callClock with its wall clock, and a device that may sign an
// atproto chain asks every other voter every clockProbeEvery. clusterNow is the
// earliest of its own clock and the voters' clocks it measured lately, once they are a
// majority. The earliest, not a median: a rev in the past costs nothing (revs only
// have to increase; relays refuse only future ones), one in the future makes relays
// refuse the repository. A median followed a majority of fast clocks: the sweep of
// the first version (the lower median) found two flapping seeds whose three devices
// had two clocks 5m50s and 9m42s fast. With the earliest, revs run ahead only when every
// voter the holder measured is fast; a slow voter holds revs back, to previous rev +
// 1 µs per commit until its clock passes it. A device alone (a single voter) signs by
// its own clock.

const callClock byte = 5

const (
	// clockProbeTimeout bounds one probe; an answer that took longer says too little.
	clockProbeTimeout = time.Second
	// clockSampleFresh is how long a member's measured offset counts.
	clockSampleFresh = time.Minute
	// clockRetry is how soon a probe round follows one that measured no member.
	clockRetry = 100 * time.Millisecond
)

// clockProbeEvery is how often a device measures the members' clocks: its lease TTL,
// at least a second, at most 10 seconds.
func (n *Node) clockProbeEvery() time.Duration {
	return min(max(n.cfg.TTL, time.Second), 10*time.Second)
}

// clockSample is one measurement of a voter's wall clock. It is kept against this
// device's monotonic clock, not its wall clock: a step of this device's wall clock
// (a clock set hours ahead) moves no other voter's estimate.
type clockSample struct {
	theirs time.Time     // the voter's wall clock as it answered
	mid    time.Duration // this device's monotonic clock at mid-trip
	at     time.Duration // this device's monotonic clock when the answer came
}

// estimate returns the voter's wall clock estimated at this device's monotonic time mono.
func (s clockSample) estimate(mono time.Duration) time.Time { return s.theirs.Add(mono - s.mid) }

type peerClocks struct {
	mu   sync.Mutex
	m    map[string]clockSample // voter ID -> its latest sample
	kick chan struct{}          // a probe round now, please (clusterNow found too few)
}

// handleClock answers a member's callClock: this device's wall clock (unix µs).
func (n *Node) handleClock() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(n.cfg.Clock.Now().UnixMicro())), nil
}

// probeClocks measures every other member's clock once and returns how many others
// there are and how many answered.
func (n *Node) probeClocks(ctx context.Context) (others, answered int) {
	ms, err := n.log.Members()
	if err != nil {
		return 0, 0
	}
	members, voters := map[string]bool{}, 0
	for _, m := range ms {
		if m.Suffrage != raft.Voter {
			continue
		}
		voters++
		id := string(m.ID)
		if id == n.id {
			continue
		}
		members[id] = true
		m0 := n.cfg.Clock.Mono()
		cctx, cancel := context.WithTimeout(ctx, clockProbeTimeout)
		out, err := n.net.Call(cctx, id, []byte{callClock})
		cancel()
		m1 := n.cfg.Clock.Mono()
		if err != nil || len(out) != 8 || m1-m0 > clockProbeTimeout {
			continue
		}
		rtt := m1 - m0
		theirs := time.UnixMicro(int64(binary.BigEndian.Uint64(out)))
		n.clocks.put(id, clockSample{theirs: theirs, mid: m0 + rtt/2, at: m1})
		answered++
	}
	n.clocks.keep(members)
	return len(members), answered
}

func (p *peerClocks) put(id string, s clockSample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]clockSample{}
	}
	p.m[id] = s
}

// keep forgets the samples of devices that are no longer voters.
func (p *peerClocks) keep(members map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.m {
		if !members[id] {
			delete(p.m, id)
		}
	}
}

// earliest is the earliest of own (this device's wall clock, at the monotonic time
// mono) and the fresh samples' estimates at mono, and how many samples counted.
func (p *peerClocks) earliest(own time.Time, mono time.Duration) (time.Time, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, n := own, 0
	for _, s := range p.m {
		if mono-s.at <= clockSampleFresh {
			if e := s.estimate(mono); e.Before(t) {
				t = e
			}
			n++
		}
	}
	return t, n
}

// clusterNow is this device's wall clock moved to the cluster's (see above): the clock
// an atproto rev is taken from. False until this device measured the clocks of a
// majority of the voters, itself included, within clockSampleFresh: a holder needs a
// majority to commit anyway, and the earliest clock of a majority is ahead only if
// every clock in it is.
//
// When it is not known it asks keepProbingClocks for a round at once: after a voter
// joined, say, the holder waits one round trip, not a probe period.
func (n *Node) clusterNow() (time.Time, bool) {
	t, _, ok := n.clusterTime(n.cfg.Clock.Now())
	if !ok {
		select {
		case n.clocks.kick <- struct{}{}:
		default:
		}
	}
	return t, ok
}

// clusterTime is the cluster clock for this device's wall clock reading own, how many
// other voters it counts, and whether it is known (a majority measured).
func (n *Node) clusterTime(own time.Time) (time.Time, int, bool) {
	ms, err := n.log.Members()
	if err != nil {
		return time.Time{}, 0, false
	}
	voters, self := 0, false
	for _, m := range ms {
		if m.Suffrage == raft.Voter {
			voters++
			self = self || string(m.ID) == n.id
		}
	}
	return n.clocks.now(own, n.cfg.Clock.Mono(), voters, self)
}

// clusterClock is the cluster clock for the state endpoint (it asks for no probe).
func (n *Node) clusterClock() *ClusterClock {
	own := n.cfg.Clock.Now()
	t, measured, ok := n.clusterTime(own)
	c := &ClusterClock{Known: ok, Measured: measured}
	if ok {
		c.OffsetMs = t.Sub(own).Milliseconds()
	}
	return c
}

// now is clusterTime at this device's monotonic time mono, with voters voters in the
// configuration, this device one of them if self.
func (p *peerClocks) now(own time.Time, mono time.Duration, voters int, self bool) (time.Time, int, bool) {
	t, measured := p.earliest(own, mono)
	counted := measured
	if self {
		counted++
	}
	if voters == 0 || counted < majority(voters) {
		return time.Time{}, measured, false // too few voters measured
	}
	return t, measured, true
}

// signsAtproto reports whether this device may sign an atproto chain (it has the
// chain key, and the key is an atproto one): only then does it measure clocks.
func (n *Node) signsAtproto() bool {
	if n.cfg.ChainKey == nil {
		return false
	}
	f, err := signer.ChainFormatOfDID(n.cfg.ChainKey.DID())
	return err == nil && f == chain.FormatAtproto
}

// keepProbingClocks measures the members' clocks until the node stops: at once, again
// soon while no member answered, then every clockProbeEvery.
func (n *Node) keepProbingClocks() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-n.clocks.kick:
			t.Stop()
		case <-n.ctx.Done():
			return
		}
		if others, answered := n.probeClocks(n.ctx); others > 0 && answered == 0 {
			t.Reset(clockRetry)
		} else {
			t.Reset(n.clockProbeEvery())
		}
	}
}
