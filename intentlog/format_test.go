package intentlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
)

// TestFormatDispatch: a genesis may declare format 1 or 3, nothing else; a commit must
// be in the chain's format; a stateful format's step refuses (bad_repo, nothing
// written) or writes its head and blocks with the commit; a step that panics refuses;
// a format without an intent rule in this build refuses intents.
func TestFormatDispatch(t *testing.T) {
	for _, v := range []uint64{0, 2, 4} {
		h := newHarness(t)
		if res := h.apply(GenesisEntry{Chain: testChain, Version: v, Nonce: make([]byte, GenesisNonceLen)}); res.Reason != ReasonBadEntry {
			t.Fatalf("genesis version %d: %v %s", v, res.Accepted, res.Reason)
		}
	}
	var step FormatStep
	fmt3 := uint64(CommitFormatAtproto)
	verify := func(raw []byte) (CommitInfo, error) {
		ci, err := testVerify(raw)
		if bytes.HasPrefix(raw[1:], []byte("testcommit2")) && ci.Epoch >= 100 { // marks a format-3 commit
			ci.Epoch -= 100
			ci.Format, ci.Step = fmt3, step
		}
		return ci, err
	}
	h := newHarness(t)
	h.f.verify = verify
	h.mustAccept(GenesisEntry{Chain: testChain, Version: CommitFormatAtproto, Nonce: make([]byte, GenesisNonceLen), TS: 1})
	h.mustAccept(ClaimEntry{Holder: "a", Epoch: 1, TS: 1, TTL: 10})
	if res := h.apply(IntentsEntry{Intents: []Intent{{ID: "x", Op: OpPut, Path: "p/1", Value: []byte("v")}}}); res.Reason != ReasonBadIntent {
		t.Fatalf("intent without a format rule: %v %s", res.Accepted, res.Reason)
	}
	ops := []Intent{{ID: "c1", Op: OpPut, Path: "p/1", Value: []byte("v")}}
	commit := func(epoch uint64) Result {
		c := testCommit{CommitInfo: CommitInfo{Seq: 1, Epoch: epoch, Signer: "a", Ops: ops}, Sig: "ok"}
		return h.apply(CommitEntry{Raw: c.encode()})
	}
	if res := commit(1); res.Reason != ReasonBadChain {
		t.Fatalf("version-1 commit on a format-3 chain: %s", res.Reason)
	}
	step = func(FormatStore) ([]byte, []FormatBlock, error) { return nil, nil, errors.New("no") }
	if res := commit(101); res.Reason != ReasonBadRepo {
		t.Fatalf("refusing step: %s", res.Reason)
	}
	step = func(FormatStore) ([]byte, []FormatBlock, error) { panic("boom") }
	if res := commit(101); res.Reason != ReasonBadRepo {
		t.Fatalf("panicking step: %s", res.Reason)
	}
	if err := h.f.ReadFormat(func(st FormatStore) error {
		if st.Head() != nil {
			t.Error("a refused commit wrote the format state")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	step = func(st FormatStore) ([]byte, []FormatBlock, error) {
		if st.Head() != nil {
			return nil, nil, errors.New("head before the first commit")
		}
		return []byte("head1"), []FormatBlock{{Key: []byte("k1"), Data: []byte("b1")}}, nil
	}
	if res := commit(101); !res.Accepted {
		t.Fatalf("step accepting: %s", res.Reason)
	}
	err := h.f.ReadFormat(func(st FormatStore) error {
		if string(st.Head()) != "head1" || string(st.Block([]byte("k1"))) != "b1" || st.Block([]byte("k2")) != nil {
			t.Errorf("format state: head %q block %q", st.Head(), st.Block([]byte("k1")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGenesisNamesRepo: a genesis that names its state (Repo) is accepted only on a
// format whose genesis rule accepts the name, and stores the head the rule gives with
// the genesis (the first commit's step reads it); a genesis without a name writes no
// format state; one on baton's format, or a name the rule refuses, is refused and
// changes nothing.
func TestGenesisNamesRepo(t *testing.T) {
	RegisterGenesisRule(CommitFormatAtproto, func(repo string) ([]byte, error) {
		if repo == "bad" {
			return nil, errors.New("bad name")
		}
		if repo == "boom" {
			panic("boom")
		}
		return []byte("head of " + repo), nil
	})
	t.Cleanup(func() {
		genesisRulesMu.Lock()
		delete(genesisRules, CommitFormatAtproto)
		genesisRulesMu.Unlock()
	})
	g := GenesisEntry{Chain: testChain, Version: CommitFormatAtproto, Nonce: make([]byte, GenesisNonceLen), TS: 1, Repo: "did:plc:x"}
	h := newHarness(t)
	h.mustAccept(g)
	head := func(h *harness) []byte {
		var b []byte
		if err := h.f.ReadFormat(func(st FormatStore) error { b = st.Head(); return nil }); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got := head(h); string(got) != "head of did:plc:x" {
		t.Fatalf("format head after a genesis naming its repo: %q", got)
	}
	gv, _ := (&Log{fsm: h.f}).Genesis()
	raw, _ := Encode(g)
	if gv.Hash != sha256.Sum256(raw) {
		t.Fatal("the genesis hash is not its bytes' (with the repo)")
	}
	plain := g
	plain.Repo = ""
	h2 := newHarness(t)
	h2.mustAccept(plain)
	if got := head(h2); got != nil {
		t.Fatalf("a genesis without a repo wrote format state %q", got)
	}
	for _, bad := range []GenesisEntry{
		func() GenesisEntry { e := g; e.Version = CommitFormatVersion; return e }(),
		func() GenesisEntry { e := g; e.Repo = "bad"; return e }(),
		func() GenesisEntry { e := g; e.Repo = "boom"; return e }(),
	} {
		h := newHarness(t)
		before := h.stateDigest()
		if res := h.apply(bad); res.Accepted || res.Reason != ReasonBadEntry {
			t.Fatalf("genesis %+v: %v %s", bad, res.Accepted, res.Reason)
		}
		if h.stateDigest() != before {
			t.Fatal("a refused genesis changed the state")
		}
	}
}
