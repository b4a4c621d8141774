package intentlog

import (
	"fmt"
	"testing"
)

// Handovers back and forth between a correct device and one two hours fast (issue
// 19.2; the simulator's profile flapping): under the version-3 rule each handover to
// the fast device moved log time one bounded step, and 20 of them within 200 s of true
// time made the dedupe window (retention 1 h) forget an acknowledged ID, whose retry
// was accepted again. A version-4 entry moves log time only between one writer's own
// stamps. The knob SharedStamp puts the version-3 rule back.
func TestClockHandoversBackAndForthKeepAcknowledgedIDs(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "fixed"
		if old {
			name = "shared-stamp"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			if old {
				h.f.knobs.SharedStamp = true
			}
			h.members("a", "b")
			g := testGenesis() // retention 1 h
			h.mustAccept(g)
			t0 := g.TS
			now := t0
			h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: now + 1000, TTL: 15_000})
			h.mustAccept(one(put("acked", "c/1", "v")))
			h.signAll()
			epoch := uint64(1)
			for i := range 40 {
				now += 5_000 // 5 s of true time per handover
				epoch++
				holder, ts := "b", now+2*hour
				if i%2 == 1 {
					holder, ts = "a", now
				}
				h.mustAccept(ClaimEntry{Holder: holder, Epoch: epoch, PrevRev: h.rev(), TS: ts, TTL: 15_000, Force: true, Reason: "failover"})
			}
			h.mustAccept(one(put("other", "c/2", "v")))
			v := h.f.View()
			r := h.apply(one(put("acked", "c/1", "v")))
			dup := r.Intents[0].Duplicate
			if old {
				if dup {
					t.Fatalf("with the version-3 rule the retry after 40 handovers was a duplicate (log time moved %d s): the knob does not put the bug back", (v.LogTime-t0)/1000)
				}
				return
			}
			if !dup || v.LogTime-t0 > now-t0 {
				t.Fatalf("retry of an acknowledged ID after %d s of true time and 40 handovers: %+v; log time moved %d s", (now-t0)/1000, r.Intents[0], (v.LogTime-t0)/1000)
			}
		})
	}
}

// One holder whose clock stepped back an hour: its commits carry its wall clock, its
// renewals at least the record's ts + 1, so its stamps alternate between an hour
// behind and the record's time. Measured from the last stamp, each renewal after a
// commit was a step ahead (the simulator's seed 7 of profile flapping); measured from
// the writer's highest stamp, none is.
func TestClockSteppedBackHolderDoesNotRatchet(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "fixed"
		if old {
			name = "shared-stamp"
		}
		t.Run(name, func(t *testing.T) { steppedBackHolder(t, old) })
	}
}

func steppedBackHolder(t *testing.T, old bool) {
	h := newHarness(t)
	h.f.knobs.SharedStamp = old
	h.members("a", "b")
	g := testGenesis() // retention 1 h
	h.mustAccept(g)
	t0 := g.TS
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: t0 + 1000, TTL: 15_000})
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: t0 + 2000})
	h.mustAccept(one(put("acked", "c/1", "v")))
	h.signAll()
	rec := t0 + 2000
	now := t0 + 2000
	for seq := range 40 {
		now += 5_000
		h.mustAccept(one(put(fmt.Sprintf("x-%d", seq), "c/2", "v")))
		hd := h.f.View().Head
		c := testCommit{CommitInfo: CommitInfo{Seq: hd.Seq + 1, Epoch: 1, Signer: "a", Ops: h.pending(), Time: now - hour}, Sig: "ok"}
		c.Prev = append([]byte{}, hd.Hash[:]...)
		h.mustAccept(CommitEntry{Raw: c.encode()})
		rec++
		h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: rec})
	}
	v := h.f.View()
	r := h.apply(one(put("acked", "c/1", "v")))
	if got := r.Intents[0]; old {
		if got.Duplicate {
			t.Fatalf("with the version-3 rule the retry was a duplicate (log time moved %d s): the knob does not put the bug back", (v.LogTime-t0)/1000)
		}
	} else if !got.Duplicate || v.LogTime-t0 > now-t0 {
		t.Fatalf("retry after %d s of true time: %+v; log time moved %d s", (now-t0)/1000, got, (v.LogTime-t0)/1000)
	}
}

// The meta record keeps StampBy (who wrote LastStamp) after the version-3 fields, only
// when set: a state no version-4 entry touched keeps the bytes version 3 wrote, and an
// empty StampBy written out is not canonical.
func TestMetaStampByCodec(t *testing.T) {
	for _, m := range []metaState{
		{Applied: 3, LogTime: 9},
		{Applied: 3, LogTime: 9, LastStamp: 7, TimeClamped: 1},
		{Applied: 3, LogTime: 9, LastStamp: 7, StampBy: "a"},
		{Applied: 3, LogTime: 9, StampBy: "a"}, // a stamp of 0 (the fuzzer's)
		{Applied: 3, LogTime: 9, Lease: Lease{Holder: "a", Epoch: 2, Nonce: 5}},
		{Applied: 3, LogTime: 9, LastStamp: 7, StampBy: "a", Lease: Lease{Holder: "a", Epoch: 2, Nonce: 1 << 63}},
	} {
		got, err := decodeMeta(m.encode())
		if err != nil || got != m {
			t.Fatalf("meta %+v round trip: %+v, %v", m, got, err)
		}
	}
	v3 := metaState{Applied: 3, LogTime: 9, LastStamp: 7, TimeClamped: 1}
	if v4 := (metaState{Applied: 3, LogTime: 9, LastStamp: 7, TimeClamped: 1, StampBy: "a"}); len(v4.encode()) <= len(v3.encode()) {
		t.Fatal("StampBy not stored")
	}
	// Hand-made: the version-3 fields, then an empty StampBy.
	w := &wbuf{}
	b, _ := unseal(bMeta, keyState, v3.encode())
	w.b = append(w.b, b...)
	w.str("")
	if _, err := decodeMeta(seal(bMeta, keyState, w.b)); err == nil {
		t.Fatal("an empty StampBy decoded")
	}
	// The lease record's nonce comes last, only when set: a state whose record has
	// none keeps its bytes, and a nonce of 0 written out is not canonical.
	withNonce := metaState{Applied: 3, LogTime: 9, LastStamp: 7, TimeClamped: 1, Lease: Lease{Nonce: 9}}
	if len(withNonce.encode()) <= len(v3.encode()) {
		t.Fatal("the lease nonce not stored")
	}
	w.uvarint(0)
	if _, err := decodeMeta(seal(bMeta, keyState, w.b)); err == nil {
		t.Fatal("an empty StampBy and a nonce of 0 decoded")
	}
}
