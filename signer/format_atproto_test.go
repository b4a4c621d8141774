package signer

import (
	"bytes"
	"context"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/fxamacker/cbor/v2"
	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

const atDID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"

type fsmRun struct {
	t       *testing.T
	f       *intentlog.FSM
	idx     uint64
	logs    []*raft.Log
	commits map[uint64][]byte // applied commits by seq, when a test keeps them
}

func newFSMRun(t *testing.T) *fsmRun {
	f, err := intentlog.NewFSM(t.TempDir(), Verifier(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fsmRun{t: t, f: f}
}

func (r *fsmRun) apply(e intentlog.Entry) intentlog.Result {
	r.t.Helper()
	b, err := intentlog.Encode(e)
	if err != nil {
		r.t.Fatal(err)
	}
	r.idx++
	l := &raft.Log{Index: r.idx, Term: 1, Type: raft.LogCommand, Data: b}
	r.logs = append(r.logs, l)
	return r.f.Apply(l).(intentlog.Result)
}

// repoState reads the applied repository (what a proposer signs on top of).
func (r *fsmRun) repoState() (atproto.Blocks, atproto.Head) {
	r.t.Helper()
	m := mapBlocks{m: map[string][]byte{}}
	var head atproto.Head
	err := r.f.ReadFormat(func(st intentlog.FormatStore) error {
		var err error
		if head, err = atproto.DecodeHead(st.Head()); err != nil {
			return err
		}
		m.st = st
		// Copy what a proposal may read: the whole tree is reachable from the head.
		if head.Commit == nil {
			return nil
		}
		bl, err := atproto.RepoBlocks(storeBlocks{st}, head)
		for _, b := range bl {
			m.m[string(b.CID)] = b.Data
		}
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	m.st = nil
	return m, head
}

type mapBlocks struct {
	m  map[string][]byte
	st intentlog.FormatStore
}

func (m mapBlocks) Get(c []byte) ([]byte, error) { return m.m[string(c)], nil }

func post(t *testing.T, text string) []byte {
	em, _ := cbor.CoreDetEncOptions().EncMode()
	v, err := em.Marshal(map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2026-12-02T02:00:00.000Z"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAtprotoChainInTheApply: a genesis declaring the atproto format; intents signed as
// atproto commits are applied by the real FSM, which keeps the repository's blocks and
// head in its transaction, refuses a commit whose rev does not increase (bad_repo)
// and a version-1 commit (bad_chain); a replay and a snapshot restore give the same
// state; the repository exported from the state loads in indigo and its signature
// verifies.
func TestAtprotoChainInTheApply(t *testing.T) {
	k, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r := newFSMRun(t)
	if res := r.apply(intentlog.GenesisEntry{Chain: k.DID(), Version: intentlog.CommitFormatAtproto,
		Nonce: bytes.Repeat([]byte{1}, intentlog.GenesisNonceLen), TS: 1000}); !res.Accepted {
		t.Fatalf("genesis: %s", res.Reason)
	}
	if res := r.apply(intentlog.ClaimEntry{Holder: "peerA", Epoch: 1, TS: 1000, TTL: 5000}); !res.Accepted {
		t.Fatalf("claim: %s", res.Reason)
	}
	ins := []intentlog.Intent{
		{ID: "i1", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vutsw2b", Value: post(t, "one")},
		{ID: "i2", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vutsw2c", Value: post(t, "two")},
	}
	// An intent the holder could never sign is refused before it enters the queue.
	for _, bad := range []intentlog.Intent{
		{ID: "b1", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vutsw2x", Value: []byte("not cbor")},
		{ID: "b2", Op: intentlog.OpPut, Path: "posts/1/2", Value: post(t, "x")},
	} {
		if res := r.apply(intentlog.IntentsEntry{Intents: []intentlog.Intent{bad}}); res.Accepted || res.Reason != intentlog.ReasonBadIntent {
			t.Fatalf("intent %s: accepted=%v %s", bad.ID, res.Accepted, res.Reason)
		}
	}
	if res := r.apply(intentlog.IntentsEntry{Intents: ins}); !res.Accepted {
		t.Fatalf("intents: %s", res.Reason)
	}
	sign := func(ops []intentlog.Intent, rev string) []byte {
		t.Helper()
		v := r.f.View()
		c := chain.Commit{Seq: v.Head.Seq + 1, Epoch: v.Lease.Epoch, Signer: v.Lease.Holder, Time: 2000, Ops: Ops(ops)}
		if v.Head.Seq > 0 {
			c.Prev = append([]byte(nil), v.Head.Hash[:]...)
		}
		bs, head := r.repoState()
		raw, err := atproto.Propose(k, bs, head, c, atDID, rev)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	if res := r.apply(intentlog.CommitEntry{Raw: sign(ins, "3l3qo2vutsw2b")}); !res.Accepted {
		t.Fatalf("commit 1: %s", res.Reason)
	}
	// Carried ops: an update and a delete.
	ops2 := []intentlog.Intent{
		{ID: "i3", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vutsw2b", Value: post(t, "one, edited")},
		{ID: "i4", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3l3qo2vutsw2c"},
	}
	// Not after the head's rev: refused by the repository step.
	if res := r.apply(intentlog.CommitEntry{Raw: sign(ops2, "3l3qo2vutsw2b")}); res.Accepted || res.Reason != intentlog.ReasonBadRepo {
		t.Fatalf("rev not increasing: accepted=%v %s", res.Accepted, res.Reason)
	}
	// A version-1 commit on an atproto chain.
	ek, _ := chain.NewEd25519KeyFromSeed(bytes.Repeat([]byte{3}, 32))
	v := r.f.View()
	v1raw, err := chain.Sign(ek, chain.Commit{Seq: v.Head.Seq + 1, Epoch: 1, Signer: "peerA", Prev: v.Head.Hash[:], Ops: Ops(ops2), Time: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.apply(intentlog.CommitEntry{Raw: v1raw}); res.Accepted || res.Reason != intentlog.ReasonBadChain {
		t.Fatalf("version-1 commit: accepted=%v %s", res.Accepted, res.Reason)
	}
	if res := r.apply(intentlog.CommitEntry{Raw: sign(ops2, "3l3qo2vutsw2d")}); !res.Accepted {
		t.Fatalf("commit 2: %s", res.Reason)
	}
	if v := r.f.View(); v.Head.Seq != 2 || v.Pending != 0 {
		t.Fatalf("view: %+v", v)
	}

	// Replay and restore give the same bytes.
	var d1 bytes.Buffer
	if err := r.f.Dump(&d1); err != nil {
		t.Fatal(err)
	}
	r2 := newFSMRun(t)
	for _, l := range r.logs {
		r2.f.Apply(l)
	}
	var d2 bytes.Buffer
	if err := r2.f.Dump(&d2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d1.Bytes(), d2.Bytes()) {
		t.Fatal("a replay of the log gives another state")
	}
	r3 := newFSMRun(t)
	if err := r3.f.Restore(nopCloser{bytes.NewReader(d1.Bytes())}); err != nil {
		t.Fatal(err)
	}
	bs, head := r3.repoState()

	// The exported repository, read by indigo.
	bl, err := atproto.RepoBlocks(bs, head)
	if err != nil {
		t.Fatal(err)
	}
	var car bytes.Buffer
	if err := atproto.WriteCAR(&car, head.Commit, bl); err != nil {
		t.Fatal(err)
	}
	ic, ir, err := repo.LoadRepoFromCAR(context.Background(), &car)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := atcrypto.ParsePublicDIDKey(k.DID())
	if err := ic.VerifySignature(pub); err != nil {
		t.Fatal(err)
	}
	got, _, err := ir.GetRecordBytes(context.Background(), "app.bsky.feed.post", "3l3qo2vutsw2b")
	if err != nil || !bytes.Equal(got, ops2[0].Value) {
		t.Fatalf("record: %v", err)
	}
	if ic.Rev != "3l3qo2vutsw2d" || ic.DID != atDID {
		t.Fatalf("commit %+v", ic)
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
