package intentlog

import (
	"testing"

	"github.com/hashicorp/raft"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWatchWakesOnApply(t *testing.T) {
	h := newHarness(t)
	w1, w2 := h.f.notify.watchCh(), h.f.notify.watchCh()
	if closed(w1) {
		t.Fatal("watch closed before any apply")
	}
	h.mustAccept(one(put("a", "c/1", "")))
	if !closed(w1) || !closed(w2) {
		t.Fatal("watchers not woken by an accepted entry")
	}
	w3 := h.f.notify.watchCh()
	h.apply(one(put("a", "c/1", ""))) // duplicate only: only the applied index moved
	if !closed(w3) {
		t.Fatal("watch not woken when the applied index moved")
	}
	w4 := h.f.notify.watchCh()
	h.apply(RenewEntry{Holder: "x", Epoch: 9}) // rejected: counters changed
	if !closed(w4) {
		t.Fatal("watch not woken by a rejection")
	}
	w5 := h.f.notify.watchCh()
	b, _ := Encode(one(put("z", "c/1", "")))
	h.f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b}) // already applied: skipped
	if closed(w5) {
		t.Fatal("watch woken by a skipped entry that changed nothing")
	}
}

func TestSubscribeDeliversTypedEvents(t *testing.T) {
	h := newHarness(t)
	sub := h.f.notify.subscribe()
	defer sub.Close()
	held(h)
	h.mustAccept(IntentsEntry{Intents: []Intent{put("i1", "c/1", "v"), put("i2", "c/2", "v")}})
	res, raw := h.commitPending(2)
	want := []Event{
		LeaseChanged{Index: 1, Event: "claim", Lease: Lease{Holder: "a", Epoch: 1, TS: 100, TTL: 1000, Rev: 1}},
		IntentAccepted{ID: "i1", Index: 2},
		IntentAccepted{ID: "i2", Index: 2},
		CommitApplied{Index: 3, Head: res.Head, Raw: raw},
	}
	for i, w := range want {
		select {
		case got := <-sub.C:
			if ca, ok := got.(CommitApplied); ok {
				wc := w.(CommitApplied)
				if ca.Index != wc.Index || ca.Head != wc.Head || string(ca.Raw) != string(wc.Raw) {
					t.Fatalf("event %d: %+v, want %+v", i, got, w)
				}
				// The ops as the apply decoded them: subscribers (the node's latency
				// metric) need not decode Raw again.
				if len(ca.Ops) != 2 || ca.Ops[0].ID != "i1" || ca.Ops[1].ID != "i2" {
					t.Fatalf("event %d carries ops %+v, want i1, i2", i, ca.Ops)
				}
			} else if got != w {
				t.Fatalf("event %d: %+v, want %+v", i, got, w)
			}
		default:
			t.Fatalf("event %d missing", i)
		}
	}
	if sub.Lost() != 0 {
		t.Fatalf("lost %d", sub.Lost())
	}
}

func TestSubscribeNeverBlocksApply(t *testing.T) {
	h := newHarness(t)
	sub := h.f.notify.subscribe()
	ins := make([]Intent, SubscriptionBuffer+10)
	for i := range ins {
		ins[i] = put(string(rune('a'+i%26))+string(rune(0x100+i)), "c/r", "")
	}
	h.mustAccept(IntentsEntry{Intents: ins}) // more events than the buffer holds
	if sub.Lost() != 10 {
		t.Fatalf("lost %d, want 10", sub.Lost())
	}
	sub.Close()
	sub.Close()
	n := 0
	for range sub.C {
		n++
	}
	if n != SubscriptionBuffer {
		t.Fatalf("drained %d events, want %d", n, SubscriptionBuffer)
	}
	h.mustAccept(one(put("after-close", "c/r", ""))) // must not panic on a closed subscription
}
