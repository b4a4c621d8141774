package intentlog

import (
	"bytes"
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
