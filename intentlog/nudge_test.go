package intentlog

import (
	"testing"
	"time"
)

// Lease entries and the first commit of an epoch are the steps of a handover that
// another device takes next: their nudge goes at once. A later commit of the same
// epoch waits nudgeDelay for an entry that carries the commit index anyway; renewals
// and intents are not nudged.
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
		wait, ok := nudgeWait(c.data, c.epoch, c.last)
		if wait != c.wait || ok != c.ok {
			t.Errorf("%s: wait %v ok %v, want %v %v", c.name, wait, ok, c.wait, c.ok)
		}
	}
}
