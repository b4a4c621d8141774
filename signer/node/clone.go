package node

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// Clones (issue 38 item 4). Two processes with one identity.key (a cloned VM, a data
// dir copied to a second machine or started beside its original) are one Raft server
// to the others: what one acknowledges the other may lack, and both answer for the
// device. Each process draws an incarnation at start; every memory call it makes
// (peermemory.go, once a PeerMemoryEvery to every other voter) carries it, its start
// time and a call counter. A restart changes the incarnation once, and the old one
// falls silent: at most the calls it had in flight arrive late. Two live processes
// keep calling: when an incarnation makes cloneCalls new calls after another
// incarnation of the same device appeared, the member names the later-started one
// the clone, and answers its calls with Memo.Clone. The clone raises its alarm (it
// claims and signs nothing from then on) and stops (Node.Cloned; `baton run` exits
// with status 4 and the message).

// cloneCalls is how many new calls an incarnation must make after another one of the
// same device appeared for the two to count as live together.
const cloneCalls = 3

// cloneForget is how long an incarnation that makes no call is remembered.
const cloneForget = 30 * time.Second

// incarnation identifies this process among those running with one identity.
type incarnation struct {
	ID    uint64
	Start int64 // unix ms of the process's start
}

func newIncarnation(now time.Time) incarnation {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return incarnation{ID: binary.BigEndian.Uint64(b[:]), Start: now.UnixMilli()}
}

// seenInc is what a member saw of one incarnation of a device.
type seenInc struct {
	inc      incarnation
	maxCall  uint64
	baseline uint64 // its maxCall when another incarnation appeared (0: none did)
	based    bool
	after    int // new calls past baseline
	lastAt   time.Time
}

// cloneTracker is a member's view of the incarnations of every other device.
type cloneTracker struct {
	mu     sync.Mutex
	byPeer map[string]map[uint64]*seenInc
	clones map[string]incarnation // peer -> the incarnation named the clone
}

func newCloneTracker() *cloneTracker {
	return &cloneTracker{byPeer: map[string]map[uint64]*seenInc{}, clones: map[string]incarnation{}}
}

// seen records a call of peer's incarnation inc with counter call (at now, this
// device's monotonic-backed time) and returns a message when inc is a clone.
func (c *cloneTracker) seen(peer string, inc incarnation, call uint64, now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	incs := c.byPeer[peer]
	if incs == nil {
		incs = map[uint64]*seenInc{}
		c.byPeer[peer] = incs
	}
	for id, s := range incs {
		if id != inc.ID && now.Sub(s.lastAt) > cloneForget {
			delete(incs, id)
		}
	}
	s := incs[inc.ID]
	if s == nil {
		s = &seenInc{inc: inc, maxCall: call}
		for _, o := range incs {
			o.baseline, o.based, o.after = o.maxCall, true, 0
		}
		incs[inc.ID] = s
	} else if call > s.maxCall {
		s.maxCall = call
		if s.based && call > s.baseline {
			s.after++
		}
	}
	s.lastAt = now
	if cl, ok := c.clones[peer]; ok {
		if cl.ID == inc.ID {
			return cloneMessage(cl, c.other(incs, cl.ID))
		}
		return ""
	}
	if s.based && s.after >= cloneCalls {
		// s kept calling after another incarnation appeared: both are live.
		newest := s.inc
		for _, o := range incs {
			if o.inc.ID != s.inc.ID && (o.inc.Start > newest.Start || o.inc.Start == newest.Start && o.inc.ID > newest.ID) {
				newest = o.inc
			}
		}
		c.clones[peer] = newest
		if newest.ID == inc.ID {
			return cloneMessage(newest, c.other(incs, newest.ID))
		}
	}
	return ""
}

// cloneOf returns the incarnation of peer named a clone, if any.
func (c *cloneTracker) cloneOf(peer string) (incarnation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc, ok := c.clones[peer]
	return inc, ok
}

func (c *cloneTracker) other(incs map[uint64]*seenInc, not uint64) incarnation {
	for id, s := range incs {
		if id != not {
			return s.inc
		}
	}
	return incarnation{}
}

func cloneMessage(clone, original incarnation) string {
	return fmt.Sprintf("another process runs with this device's identity (identity.key), started at %s; this one, started at %s, is the later and stops: "+
		"a data dir copied to another machine or started beside its original, or a cloned machine, must not run as the same device. "+
		"To add a device, `baton init` a new one and join it (`baton invite` on a member, `baton join` there)",
		time.UnixMilli(original.Start).UTC().Format(time.RFC3339), time.UnixMilli(clone.Start).UTC().Format(time.RFC3339))
}

// cloneDetected raises the clone alarm on this process (once): Health fails from now
// on (it claims and signs nothing) and Cloned is closed.
func (n *Node) cloneDetected(msg string) {
	err := fmt.Errorf("%w: %s", ErrClone, msg)
	if n.cloneErr.CompareAndSwap(nil, &err) {
		n.logger.Error("this process is a clone of a running device: it signs nothing and stops", "err", msg)
		close(n.cloned)
	}
}

// Cloned is closed when a member found that another process runs with this
// device's identity and started earlier: this one must stop (CloneError says why).
func (n *Node) Cloned() <-chan struct{} { return n.cloned }

// CloneError is the clone alarm's error (nil before Cloned is closed).
func (n *Node) CloneError() error {
	if p := n.cloneErr.Load(); p != nil {
		return *p
	}
	return nil
}
