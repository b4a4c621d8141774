package intentlog

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Lease entries and the first commit of an epoch are the steps of a handover that
// another device takes next: their nudge goes at once. A later commit of the same
// epoch waits nudgeDelay for an entry that carries the commit index anyway; renewals
// and intents are nudged only when a nudge is a commit notice (no log entry).
func TestNudgeWait(t *testing.T) {
	enc := func(e Entry) []byte {
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	commit := enc(CommitEntry{Raw: []byte{0xa0}})
	cases := []struct {
		name        string
		data        []byte
		epoch, last uint64
		wait        time.Duration
		ok          bool
	}{
		{"release", enc(ReleaseEntry{Holder: "a", Epoch: 3, PrevRev: 9}), 3, 3, 0, true},
		{"claim", enc(ClaimEntry{Holder: "b", Epoch: 4, PrevRev: 10, TS: 1, TTL: 1000}), 3, 3, 0, true},
		{"transfer", enc(TransferEntry{Holder: "a", Epoch: 3, To: "b", TS: 1}), 3, 3, 0, true},
		{"first commit of an epoch", commit, 4, 3, 0, true},
		{"later commit", commit, 4, 4, nudgeDelay, true},
		{"renewal", enc(RenewEntry{Holder: "a", Epoch: 3, PrevRev: 9, TS: 2}), 3, 3, 0, false},
		{"intents", enc(IntentsEntry{Intents: []Intent{{ID: "x", Op: OpPut, Path: "p", Value: []byte("v")}}}), 3, 3, 0, false},
	}
	for _, c := range cases {
		wait, ok := nudgeWait(c.data, c.epoch, c.last, false)
		if wait != c.wait || ok != c.ok {
			t.Errorf("%s: wait %v ok %v, want %v %v", c.name, wait, ok, c.wait, c.ok)
		}
		// With commit notices (no entry per nudge) renewals and intents go at once
		// too; the rest is the same.
		wantOK := c.ok || c.name == "renewal" || c.name == "intents"
		if wait, ok := nudgeWait(c.data, c.epoch, c.last, true); wait != c.wait || ok != wantOK {
			t.Errorf("%s, noticed: wait %v ok %v, want %v %v", c.name, wait, ok, c.wait, wantOK)
		}
	}
}

// A commit's nudge waits nudgeDelay from its own apply for a later entry. One client
// submitting one intent at a time has its next commit appended a little after the last
// one applied, and each commit applied a little under nudgeDelay after the one before:
// no commit but the last needs a barrier. The wait used to count from the apply of the
// commit that started the nudge goroutine, so the next commit's nudge found no later
// entry at that moment and appended a barrier, in the way of the next commit's log
// write (114 barriers per second for 462 commits, TestTraceLoad at one client).
func TestNudgeWaitsFromEachCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var last, barriers atomic.Uint64
		n := testNudger(&last, &barriers)
		commit := []byte{CodecVersion, kindCommit}
		const commits = 20
		for i := 0; i < commits; i++ {
			n.request(commit, Result{Accepted: true, Head: Head{Epoch: 1}})
			if i == commits-1 {
				break // the last commit: nothing follows it
			}
			time.Sleep(300 * time.Microsecond)
			last.Add(1) // the next commit is appended...
			time.Sleep(nudgeDelay - 500*time.Microsecond)
			// ... and applies 1.8 ms after the one before
		}
		time.Sleep(3 * nudgeDelay)
		synctest.Wait()
		if got := barriers.Load(); got != 1 {
			t.Fatalf("%d barriers for %d commits one after the other, want 1 (after the last)", got, commits)
		}
	})
}

// A later commit's request does not put off an urgent nudge that no entry has carried
// yet: a commit appended before the claim applied (several commits in flight) left
// before the leader's commit index covered the claim.
func TestNudgeUrgentNotPutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var last, barriers atomic.Uint64
		n := testNudger(&last, &barriers)
		n.request([]byte{CodecVersion, kindClaim}, Result{Accepted: true, Head: Head{Epoch: 1}})
		n.request([]byte{CodecVersion, kindCommit}, Result{Accepted: true, Head: Head{Epoch: 1}})
		time.Sleep(nudgeDelay / 4)
		synctest.Wait()
		if got := barriers.Load(); got != 1 {
			t.Fatalf("%d barriers within %v of the claim, want 1 at once", got, nudgeDelay/4)
		}
		time.Sleep(3 * nudgeDelay) // the nudge goroutine ends
	})
}

// testNudger returns a nudger of a log whose last index is last (starting at 10) and
// whose barriers count in barriers (each one appends an entry), with a commit of
// epoch 1 already nudged.
func testNudger(last, barriers *atomic.Uint64) *nudger {
	last.Store(10)
	n := newNudger(last.Load, func() { barriers.Add(1); last.Add(1) }, func() bool { return false }, false)
	n.epoch = 1
	return n
}
