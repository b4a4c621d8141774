package intentlog

import (
	"fmt"
	"testing"
)

// A claim from a device whose clock is two hours fast (retention 1 h) must not make the
// dedupe window forget an acknowledged ID: its retry is still answered as a duplicate
// (issue 19, item 2).
func TestClockAheadClaimKeepsAcknowledgedIDs(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b")
	g := testGenesis() // retention 1 h
	h.mustAccept(g)
	t0 := g.TS
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: t0 + 1000, TTL: 15_000})
	h.mustAccept(one(put("acked", "c/1", "v")))
	h.signAll()
	// b's clock is two hours fast; it claims (a steal here, a failover in life).
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: 2, PrevRev: h.rev(), TS: t0 + 2000 + 2*hour, TTL: 15_000,
		Force: true, Reason: "failover"})
	h.mustAccept(one(put("other", "c/2", "v"))) // any accepted entry runs the eviction
	r := h.apply(one(put("acked", "c/1", "v")))
	if got := r.Intents[0]; !got.Duplicate {
		t.Fatalf("retry of an acknowledged ID after a claim 2 h fast: %+v, want a duplicate", got)
	}
	if v := h.f.View(); v.LogTime-t0 > hour/16+2000 {
		t.Fatalf("log time moved %d ms (%d clamped), want at most the bound", v.LogTime-t0, v.TimeClamped)
	}
}

// With MaxIDs set, a claim from a clock a year fast must not make later intents answer
// backlog once the retention has passed on correct clocks (issue 19, item 2).
func TestClockYearAheadDoesNotBacklog(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b", "c")
	g := testGenesis() // retention 1 h
	g.MaxIDs = 200
	h.mustAccept(g)
	now := g.TS
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: now, TTL: 60_000})
	const year = 365 * 24 * hour
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: 2, PrevRev: h.rev(), TS: now + year, TTL: 60_000,
		Force: true, Reason: "failover"})
	now += 1000
	h.mustAccept(ClaimEntry{Holder: "c", Epoch: 3, PrevRev: h.rev(), TS: now, TTL: 60_000,
		Force: true, Reason: "back to a correct clock"})
	submit := func(round int) (backlog int) {
		for i := range 200 {
			r := h.apply(one(put(fmt.Sprintf("r%d-%03d", round, i), "c/1", "v")))
			if !r.Accepted {
				if r.Intents[0].Reason != ReasonBacklog {
					t.Fatalf("refused: %+v", r)
				}
				backlog++
			}
		}
		h.signAll()
		return backlog
	}
	if n := submit(0); n != 0 {
		t.Fatalf("first 200 intents: %d backlog", n)
	}
	// Two hours pass on c's correct clock, renewing every minute.
	for range 120 {
		now += 60_000
		h.mustAccept(RenewEntry{Holder: "c", Epoch: 3, PrevRev: h.rev(), TS: now})
	}
	if n := submit(1); n != 0 {
		t.Fatalf("after the retention passed on correct clocks, %d of 200 intents answered backlog", n)
	}
}

// A version-2 entry (an older build's) keeps its log time rule on replay: it moves log
// time to its timestamp however far ahead, and it re-encodes to the same bytes.
func TestClockV2EntriesKeepTheirRule(t *testing.T) {
	h := newHarness(t)
	h.members("a", "b")
	g := testGenesis()
	g.ver = CodecVersionV2
	h.mustAccept(g)
	c := ClaimEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: g.TS + 2*hour, TTL: 15_000, ver: CodecVersionV2}
	b := mustEncode(t, c)
	if b[0] != CodecVersionV2 {
		t.Fatalf("a v2 entry encodes as version %d", b[0])
	}
	if back, err := Decode(b); err != nil || back != c {
		t.Fatalf("v2 round trip: %#v, %v", back, err)
	}
	h.applyRaw(b)
	if v := h.f.View(); v.LogTime != g.TS+2*hour || v.TimeClamped != 0 {
		t.Fatalf("v2 claim: log time %d (clamped %d), want its ts", v.LogTime, v.TimeClamped)
	}
	// A version-3 entry after it steps from it.
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: g.TS + 3*hour, ver: CodecVersionV3})
	if v := h.f.View(); v.LogTime != g.TS+2*hour+hour/16 || v.TimeClamped != 1 {
		t.Fatalf("v3 renew after it: log time %d (clamped %d)", v.LogTime-g.TS, v.TimeClamped)
	}
	// A version-4 entry after that is a new writer's first stamp (the v3 one's writer
	// is not recorded): it moves nothing; the next one steps from it.
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: g.TS + 4*hour})
	if v := h.f.View(); v.LogTime != g.TS+2*hour+hour/16 {
		t.Fatalf("v4 renew after a v3 one: log time %d", v.LogTime-g.TS)
	}
	h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: h.rev(), TS: g.TS + 4*hour + 1000})
	if v := h.f.View(); v.LogTime != g.TS+2*hour+hour/16+1000 {
		t.Fatalf("v4 renew after it: log time %d", v.LogTime-g.TS)
	}
}
