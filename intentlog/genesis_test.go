package intentlog

import (
	"bytes"
	"crypto/sha256"
	"io"
	"strings"
	"testing"
)

func testGenesis() GenesisEntry {
	return GenesisEntry{Chain: testChain, Version: CommitFormatVersion,
		Nonce: bytes.Repeat([]byte{0xa5}, GenesisNonceLen), TS: 1_700_000_000_000,
		Retention: 3_600_000, MaxIDs: 1000}
}

func TestGenesisAcceptedOnce(t *testing.T) {
	h := newHarness(t)
	l := &Log{fsm: h.f}
	if _, ok := l.Genesis(); ok {
		t.Fatal("genesis before any was applied")
	}
	g := testGenesis()
	data, err := Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	res := h.applyRaw(data)
	if !res.Accepted {
		t.Fatalf("genesis: %+v", res)
	}
	got, ok := l.Genesis()
	want := Genesis{Chain: g.Chain, Version: 1, TS: g.TS, Retention: g.Retention, MaxIDs: g.MaxIDs,
		Hash: sha256.Sum256(data), Index: h.idx}
	copy(want.Nonce[:], g.Nonce)
	if !ok || got != want {
		t.Fatalf("Genesis() = %+v %v, want %+v", got, ok, want)
	}
	if v := h.f.View(); v.Genesis != want || v.Chain != testChain {
		t.Fatalf("view genesis %+v chain %q", v.Genesis, v.Chain)
	}
	// A second genesis (even an identical one) is refused and changes nothing.
	before := h.stateDigest()
	for _, e := range []GenesisEntry{g, {Chain: "did:key:zother", Version: 1, Nonce: make([]byte, 16)}} {
		if r := h.apply(e); r.Accepted || r.Reason != ReasonGenesisExists {
			t.Fatalf("second genesis: %+v", r)
		}
	}
	if h.stateDigest() != before {
		t.Fatal("a refused genesis changed the state")
	}
	// It is part of the state: snapshots carry it.
	c := newHarness(t)
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(h.dump()))); err != nil {
		t.Fatal(err)
	}
	if got, ok := (&Log{fsm: c.f}).Genesis(); !ok || got != want {
		t.Fatalf("restored genesis %+v %v", got, ok)
	}
}

func TestGenesisRejects(t *testing.T) {
	mod := func(f func(*GenesisEntry)) GenesisEntry { g := testGenesis(); f(&g); return g }
	cases := []struct {
		name string
		e    GenesisEntry
		want Reason
	}{
		{"empty chain", mod(func(g *GenesisEntry) { g.Chain = "" }), ReasonBadEntry},
		{"chain not utf8", mod(func(g *GenesisEntry) { g.Chain = "did:key:\xff" }), ReasonBadEntry},
		{"chain with control", mod(func(g *GenesisEntry) { g.Chain = "did:key:z\n" }), ReasonBadEntry},
		{"chain too long", mod(func(g *GenesisEntry) { g.Chain = "did:key:z" + strings.Repeat("x", MaxChainLen) }), ReasonTooLarge},
		{"version 0", mod(func(g *GenesisEntry) { g.Version = 0 }), ReasonBadEntry},
		{"version 2", mod(func(g *GenesisEntry) { g.Version = 2 }), ReasonBadEntry},
		{"short nonce", mod(func(g *GenesisEntry) { g.Nonce = g.Nonce[:15] }), ReasonBadEntry},
		{"no nonce", mod(func(g *GenesisEntry) { g.Nonce = nil }), ReasonBadEntry},
		{"long nonce", mod(func(g *GenesisEntry) { g.Nonce = append(g.Nonce, 0) }), ReasonBadEntry},
		{"negative retention", mod(func(g *GenesisEntry) { g.Retention = -1 }), ReasonBadEntry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			before := h.stateDigest()
			if r := h.apply(tc.e); r.Accepted || r.Reason != tc.want {
				t.Fatalf("got %+v, want %s", r, tc.want)
			}
			if h.stateDigest() != before {
				t.Fatal("refused genesis changed the state")
			}
		})
	}
}

// The apply checks a commit's chain against the genesis DID (the verifier checks the
// signature under the key the commit itself names).
func TestCommitChainMustMatchGenesis(t *testing.T) {
	h := newHarness(t)
	h.mustAccept(testGenesis())
	heldWithPending(h)
	before := h.stateDigest()
	raw := commitRaw(h, func(c *testCommit) { c.Chain = "did:key:zimpostor" })
	if r := h.apply(CommitEntry{Raw: raw}); r.Accepted || r.Reason != ReasonBadChain {
		t.Fatalf("commit of another chain: %+v, want bad_chain", r)
	}
	if h.stateDigest() != before {
		t.Fatal("refused commit changed the state")
	}
	if r, _ := h.commitPending(1); !r.Accepted {
		t.Fatalf("commit of the genesis chain: %s", r.Reason)
	}
}

// Legacy logs have no genesis: the first accepted commit fixes the chain, later commits
// must match it, and a late genesis (the node proposes one when it finds none) is
// accepted only for that chain.
func TestLegacyChainFixedByFirstCommit(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	if v := h.f.View(); v.Chain != "" {
		t.Fatalf("chain before any commit %q", v.Chain)
	}
	if r, _ := h.commitPending(1); !r.Accepted {
		t.Fatal(r.Reason)
	}
	if v := h.f.View(); v.Chain != testChain || v.Genesis != (Genesis{}) {
		t.Fatalf("after the first commit: chain %q genesis %+v", v.Chain, v.Genesis)
	}
	if r := h.apply(CommitEntry{Raw: commitRaw(h, func(c *testCommit) { c.Chain = "did:key:zother" })}); r.Reason != ReasonBadChain {
		t.Fatalf("commit of another chain: %+v", r)
	}
	wrong := testGenesis()
	wrong.Chain = "did:key:zother"
	if r := h.apply(wrong); r.Reason != ReasonBadChain {
		t.Fatalf("late genesis of another chain: %+v", r)
	}
	if r := h.apply(testGenesis()); !r.Accepted {
		t.Fatalf("late genesis of the chain: %+v", r)
	}
	if g, ok := (&Log{fsm: h.f}).Genesis(); !ok || g.Chain != testChain {
		t.Fatalf("genesis %+v %v", g, ok)
	}
	if r, _ := h.commitPending(1); !r.Accepted {
		t.Fatal(r.Reason)
	}
}

// A genesis with no commits yet, after other entries, is fine (the node of a legacy log
// without commits proposes it late).
func TestLateGenesisBeforeAnyCommit(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	h.mustAccept(testGenesis())
	if r, _ := h.commitPending(2); !r.Accepted {
		t.Fatal(r.Reason)
	}
}

func TestCommitInfoCarriesChainAndTime(t *testing.T) {
	raw := testCommit{CommitInfo: CommitInfo{Seq: 1, Epoch: 1, Signer: "a", Chain: "did:key:zx", Time: 42}, Sig: "ok"}.encode()
	ci, err := testVerify(raw)
	if err != nil || ci.Chain != "did:key:zx" || ci.Time != 42 {
		t.Fatalf("%+v %v", ci, err)
	}
}
