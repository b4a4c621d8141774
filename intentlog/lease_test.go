package intentlog

import (
	"bytes"
	"io"
	"testing"

	"github.com/batonhq/baton/internal/knobs"
)

// DESIGN, Claim: "a renewal applied after the claimant looked makes the claim lose".
// The claimant reads the record (rev R), the holder's renewal lands (rev R'), then the
// claim arrives: refused with stale_rev, and the holder keeps the lease.
func TestClaimLosesToRenewalAppliedAfterRead(t *testing.T) {
	h := newHarness(t)
	held(h)
	seen := h.f.View().Lease // what the claimant decided on
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: seen.Rev, TS: 900})
	before := h.stateDigest()
	res := h.apply(ClaimEntry{Holder: "b", Epoch: seen.Epoch + 1, PrevRev: seen.Rev, TS: 1200, TTL: 1000})
	if res.Accepted || res.Reason != ReasonStaleRev {
		t.Fatalf("claim decided before the renewal: %+v, want stale_rev", res)
	}
	if h.stateDigest() != before || h.f.View().Lease.Holder != "a" {
		t.Fatal("the refused claim changed the lease")
	}
	if got := h.f.Rejections()[ReasonStaleRev]; got != 1 {
		t.Fatalf("stale_rev rejections %d", got)
	}
	// Decided on the current record, the same claim wins.
	cur := h.f.View().Lease
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: cur.Epoch + 1, PrevRev: cur.Rev, TS: 1300, TTL: 1000})
}

// The EpochOnlyClaim knob restores the epoch-only compare: the same interleaving lets
// the claim win (the split brain the revision prevents).
func TestKnobEpochOnlyClaim(t *testing.T) {
	h := newHarness(t)
	h.f.knobs = knobs.Intentlog{EpochOnlyClaim: true}
	held(h)
	seen := h.f.View().Lease
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: seen.Rev, TS: 900})
	res := h.apply(ClaimEntry{Holder: "b", Epoch: seen.Epoch + 1, PrevRev: seen.Rev, TS: 1200, TTL: 1000})
	if !res.Accepted || res.Lease.Holder != "b" {
		t.Fatalf("with the knob the stale claim should win: %+v", res)
	}
	// The knob does not change anything but claims: a stale renewal is still refused.
	if r := h.apply(RenewEntry{Holder: "b", Epoch: 2, PrevRev: 1, TS: 1300}); r.Reason != ReasonStaleRev {
		t.Fatalf("renew with the knob: %+v", r)
	}
	if r := h.apply(ClaimEntry{Holder: "c", Epoch: 2, PrevRev: res.Lease.Rev, TTL: 5}); r.Reason != ReasonEpochMismatch {
		t.Fatalf("same-epoch claim with the knob: %+v", r)
	}
}

// Every accepted lease entry moves Rev to its index; a refused one does not.
func TestLeaseRevIsIndexOfLastLeaseWrite(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b")
	if h.rev() != 0 {
		t.Fatalf("rev before any lease entry %d", h.rev())
	}
	steps := []Entry{
		ClaimEntry{Holder: "a", Epoch: 1, PrevRev: 0, TS: 1, TTL: 10},
		RenewEntry{Holder: "a", Epoch: 1, TS: 2},
		TransferEntry{Holder: "a", Epoch: 1, To: "b", TS: 3},
		ReleaseEntry{Holder: "b", Epoch: 2},
		ClaimEntry{Holder: "a", Epoch: 3, TS: 4, TTL: 10, Force: true, Reason: "test"},
	}
	for _, e := range steps {
		switch x := e.(type) {
		case RenewEntry:
			x.PrevRev = h.rev()
			e = x
		case TransferEntry:
			x.PrevRev = h.rev()
			e = x
		case ReleaseEntry:
			x.PrevRev = h.rev()
			e = x
		case ClaimEntry:
			x.PrevRev = h.rev()
			e = x
		}
		h.mustAccept(e)
		if h.rev() != h.idx {
			t.Fatalf("after %T at %d: rev %d", e, h.idx, h.rev())
		}
		rev := h.rev()
		h.mustAccept(one(put("x"+string(rune('a'+h.idx)), "c/r", ""))) // not a lease entry
		h.apply(RenewEntry{Holder: "z", Epoch: 9})                     // refused
		if h.rev() != rev {
			t.Fatalf("rev moved to %d on a non-lease or refused entry", h.rev())
		}
	}
}

// Version-1 lease entries keep their rules on replay: claims compare the epoch only,
// renew, release and transfer check holder and epoch without a revision.
func TestV1LeaseEntriesKeepTheirRules(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b")
	h.mustAccept(legacyClaim(ClaimEntry{Holder: "a", Epoch: 1, TS: 1, TTL: 10}, 0))
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, TS: 2, v1: true})
	// The renewal moved the revision, but a v1 claim does not look at it.
	if r := h.apply(legacyClaim(ClaimEntry{Holder: "b", Epoch: 2, TS: 3, TTL: 10}, 0)); r.Reason != ReasonEpochMismatch {
		t.Fatalf("v1 claim with a wrong PrevEpoch: %+v", r)
	}
	if r := h.apply(legacyClaim(ClaimEntry{Holder: "b", Epoch: 3, TS: 3, TTL: 10}, 2)); r.Reason != ReasonEpochMismatch {
		t.Fatalf("v1 claim with PrevEpoch ahead: %+v", r)
	}
	r := h.mustAccept(legacyClaim(ClaimEntry{Holder: "b", Epoch: 2, TS: 4, TTL: 10}, 1))
	if r.Lease.Rev != h.idx {
		t.Fatalf("a v1 claim sets the revision too: %+v", r.Lease)
	}
	h.mustAccept(TransferEntry{Holder: "b", Epoch: 2, To: "a", TS: 5, v1: true})
	h.mustAccept(ReleaseEntry{Holder: "a", Epoch: 3, v1: true})
	// And a version-1 intents entry accepts what version 1 accepted.
	res := h.apply(IntentsEntry{Intents: []Intent{put("i\x01", "c/..", "v")}, v1: true})
	if !res.Accepted {
		t.Fatalf("v1 intent: %+v", res)
	}
	if r := h.apply(one(put("j\x01", "c/..", "v"))); r.Accepted {
		t.Fatal("v2 intent with a control character and a .. segment accepted")
	}
}

// The record keeps the nonce of the claim that started the hold (ClaimEntry.Nonce):
// a renewal keeps it, a release and a transfer clear it, a claim without one leaves
// 0; it survives a snapshot restore and a reopen of the state file.
func TestLeaseRecordKeepsClaimNonce(t *testing.T) {
	dir := t.TempDir()
	f0, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f0}
	h.members("a", "b")
	nonce := func() uint64 { return h.f.View().Lease.Nonce }
	if r := h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, TS: 1, TTL: 10, Nonce: 42}); r.Lease.Nonce != 42 || nonce() != 42 {
		t.Fatalf("claim: result %+v, record nonce %d", r.Lease, nonce())
	}
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: 2})
	if nonce() != 42 {
		t.Fatalf("renewal changed the nonce to %d", nonce())
	}
	// Through a snapshot: the record, nonce included, is restored as it was.
	other := newHarness(t)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(h.dump()))); err != nil {
		t.Fatal(err)
	}
	if got := other.f.View().Lease; got != h.f.View().Lease {
		t.Fatalf("restored record %+v, want %+v", got, h.f.View().Lease)
	}
	h.mustAccept(TransferEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), To: "b", TS: 3})
	if nonce() != 0 {
		t.Fatalf("transfer kept nonce %d: b's record was not claimed by any process of b", nonce())
	}
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 3, PrevRev: h.rev(), TS: 4, TTL: 10, Force: true, Reason: "test", Nonce: 7})
	h.mustAccept(ReleaseEntry{Holder: "a", Epoch: 3, PrevRev: h.rev()})
	if nonce() != 0 {
		t.Fatalf("release kept nonce %d", nonce())
	}
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: 4, PrevRev: h.rev(), TS: 5, TTL: 10})
	if nonce() != 0 {
		t.Fatalf("a claim without a nonce left %d", nonce())
	}
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: 5, PrevRev: h.rev(), TS: 6, TTL: 10, Nonce: 1 << 63})
	want := h.f.View()
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.View(); got != want {
		t.Fatalf("reopened view %+v, want %+v", got, want)
	}
}
