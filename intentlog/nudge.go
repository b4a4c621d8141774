package intentlog

import (
	"sync"
	"time"
)

// nudgeTimeout bounds one nudge's barrier.
const nudgeTimeout = 5 * time.Second

// nudgeDelay is how long the leader waits for a later entry (which carries the
// commit index for free) before it nudges. Under load the next entry comes
// within it, so busy clusters write no barriers: a barrier right away cost a client
// that submits one intent at a time a third Raft round per intent (8.9 ms instead of
// 5.2 ms per accepted intent in BenchmarkSubmitAccepted). Idle, it adds this much to
// the followers' wait, against CommitTimeout's 50 to 100 ms.
const nudgeDelay = 2 * time.Millisecond

// nudger makes followers learn the leader's commit index at once after an entry that
// other devices wait for (a claim, release or transfer, a signed commit).
//
// A follower applies an entry only when an AppendEntries tells it the entry is
// committed. hashicorp/raft's heartbeats do not carry the commit index; without a
// later entry the leader sends it only after CommitTimeout (50 to 100 ms with
// raft's default), and that delay lands on every handover (the standby learns of a
// release late, the new holder waits to apply its own claim before signing) and on
// every WaitSigned on a follower. A nudge is a commit notice (notice.go: the
// AppendEntries Raft sends on CommitTimeout, sent at once, no entry written), or where
// the transport cannot send one a barrier, whose AppendEntries carries the commit
// index. After a commit it is skipped when an entry is appended within nudgeDelay
// after the apply (that entry carries it); after a lease entry (claim, release,
// transfer: rare, and each one a step of a handover that another device takes next)
// and after the first commit of an epoch (the end of a handover) it goes at once.
// Nudges are coalesced while one is in flight. Renewals and intents are nudged at once
// when nudges are notices; with barriers they are not (an idle cluster then writes no
// more entries than its renewals).
type nudger struct {
	mu      sync.Mutex
	running bool
	pending bool          // a nudge was asked for since the last one went
	mark    uint64        // the log's last index when it was asked for
	due     time.Time     // when the nudge goes unless the log grows past mark
	now     chan struct{} // an urgent nudge asks the waiting one to go at once
	epoch   uint64        // the head's epoch at the last commit nudged
	nudges  uint64        // nudges sent (tests)

	// The log it nudges: its last index, a nudge (a commit notice, or a barrier
	// appended and waited for), whether it is closed; whether nudges are notices.
	lastIndex func() uint64
	send      func()
	closed    func() bool
	noticed   bool
}

// newNudger returns the nudger of a log. noticed: send sends a commit notice
// (notice.go), which writes no entry, so renewals and intents are nudged too.
func newNudger(lastIndex func() uint64, send func(), closed func() bool, noticed bool) *nudger {
	return &nudger{lastIndex: lastIndex, send: send, closed: closed, noticed: noticed, now: make(chan struct{}, 1)}
}

// nudgeWait is how long the leader waits, after the entry encoded as data applied
// with the head at epoch, for a later entry before it nudges; ok is false for an entry
// not nudged. lastEpoch is the head's epoch at the previous commit nudged. noticed:
// the nudge is a commit notice, not a log entry.
func nudgeWait(data []byte, epoch, lastEpoch uint64, noticed bool) (wait time.Duration, ok bool) {
	if len(data) < 2 {
		return 0, false
	}
	switch data[1] {
	case kindClaim, kindRelease, kindTransfer:
		return 0, true
	case kindCommit:
		if epoch != lastEpoch {
			return 0, true
		}
		return nudgeDelay, true
	case kindIntents, kindRenew:
		// With notices they cost no entry: a next holder waits for an intent logged
		// while the lease was free (it signs what the log holds), and an observer's
		// view of the lease is current at once.
		return 0, noticed
	}
	return 0, false
}

// request is called on the leader when it has applied the entry encoded as data
// with result res (FSM.applied, on the apply's goroutine: it must not block). An
// entry appended after this moment carries the commit index in its AppendEntries, and
// one appended before may not (it can have left before this entry committed): so the
// nudge is skipped only if the log grew past its current last index while waiting.
func (n *nudger) request(data []byte, res Result) {
	n.mu.Lock()
	wait, ok := nudgeWait(data, res.Head.Epoch, n.epoch, n.noticed)
	if !ok {
		n.mu.Unlock()
		return
	}
	if data[1] == kindCommit && res.Accepted {
		n.epoch = res.Head.Epoch
	}
	// The wait counts from this entry's apply. An entry appended since the last
	// request carries the entries applied before it, so the earlier due time goes;
	// with none appended since, the earlier one still needs its nudge by then.
	due, last := time.Now().Add(wait), n.lastIndex()
	if n.pending && last <= n.mark {
		due = minTime(due, n.due)
	}
	n.due, n.mark, n.pending = due, max(n.mark, last), true
	if n.running {
		if wait == 0 {
			select {
			case n.now <- struct{}{}:
			default:
			}
		}
		n.mu.Unlock()
		return
	}
	n.running = true
	now := n.now
	n.mu.Unlock()
	go func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		// An urgent nudge goes at once, without a round through the timer.
		for urgent := wait == 0; ; urgent = false {
			if !urgent {
				select {
				case <-t.C:
				case <-now:
				}
			}
			n.mu.Lock()
			if !n.pending || n.closed() || n.lastIndex() > n.mark {
				n.running, n.pending = false, false
				select {
				case <-now: // the timer won the race with a signal: no stale one for the next nudge
				default:
				}
				n.mu.Unlock()
				return
			}
			if d := time.Until(n.due); d > 0 {
				n.mu.Unlock() // a later entry asked since: wait from its apply
				t.Reset(d)
				continue
			}
			n.pending = false
			n.nudges++
			n.mu.Unlock()
			// A notice, or a barrier (a log entry: its AppendEntries carries the commit
			// index).
			n.send()
			t.Reset(nudgeDelay)
		}
	}()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (l *Log) nudgeCount() uint64 {
	l.nudger.mu.Lock()
	defer l.nudger.mu.Unlock()
	return l.nudger.nudges
}
