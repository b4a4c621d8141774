package signer

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/chain/atproto/indigocheck"
)

// fsmChainLog is the parts of a ChainLog signAtproto reads, over a real FSM.
type fsmChainLog struct {
	ChainLog // nil: the methods signAtproto does not use
	r        *fsmRun
}

func (l fsmChainLog) View() intentlog.View { return l.r.f.View() }
func (l fsmChainLog) Commit(seq uint64) ([]byte, error) {
	raw, ok := l.r.commits[seq]
	if !ok {
		return nil, intentlog.ErrNotFound
	}
	return raw, nil
}
func (l fsmChainLog) ReadFormat(fn func(intentlog.FormatStore) error) error {
	return l.r.f.ReadFormat(fn)
}

// TestLoopSignsAtproto: the loop signs in the chain's format. On an atproto genesis it
// signs one commit at a time (maxInFlight 1), on top of the applied repository; the
// rev's clock is bounded at log time + MaxRevAhead (a clock an hour fast does not
// carry a future rev), and a slow clock still gives a rev after the previous one;
// every commit it signs is accepted by the real apply. A repository that is not the
// applied head's is not signed on (errRepoMoved).
func TestLoopSignsAtproto(t *testing.T) {
	k, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r := newFSMRun(t)
	r.commits = map[uint64][]byte{}
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if res := r.apply(intentlog.GenesisEntry{Chain: k.DID(), Version: intentlog.CommitFormatAtproto,
		Nonce: bytes.Repeat([]byte{1}, intentlog.GenesisNonceLen), TS: t0.UnixMilli()}); !res.Accepted {
		t.Fatalf("genesis: %s", res.Reason)
	}
	if res := r.apply(intentlog.ClaimEntry{Holder: "peerA", Epoch: 1, TS: t0.UnixMilli(), TTL: 5000}); !res.Accepted {
		t.Fatalf("claim: %s", res.Reason)
	}
	clk := election.NewManualClock(t0.Add(time.Hour)) // an hour fast
	log := fsmChainLog{r: r}
	l := &Loop{cfg: LoopConfig{Key: k, Log: log, Clock: clk, MaxInFlight: 8}, did: k.DID()}
	if got := l.maxInFlight(r.f.View()); got != 1 {
		t.Fatalf("maxInFlight on an atproto chain: %d", got)
	}
	sign := func(id, rkey string) (string, intentlog.Result) {
		t.Helper()
		v := r.f.View()
		cm := chain.Commit{Seq: v.Head.Seq + 1, Epoch: 1, Signer: "peerA", Time: clk.Now().UnixMilli(),
			Ops: Ops([]intentlog.Intent{{ID: id, Op: intentlog.OpPut, Path: "app.bsky.feed.post/" + rkey, Value: post(t, id)}})}
		if v.Head.Seq > 0 {
			cm.Prev = append([]byte(nil), v.Head.Hash[:]...)
		}
		raw, err := l.signCommit(v, cm)
		if err != nil {
			t.Fatal(err)
		}
		res := r.apply(intentlog.CommitEntry{Raw: raw})
		if res.Accepted {
			r.commits[cm.Seq] = raw
		}
		e, _ := atproto.DecodeEnvelope(raw)
		return e.Repo.Rev, res
	}
	rev1, res := sign("i1", "3l3qo2vut0001")
	if !res.Accepted {
		t.Fatalf("commit 1: %s", res.Reason)
	}
	tid, _ := syntax.ParseTID(rev1)
	if limit := time.UnixMilli(r.f.View().LogTime).Add(MaxRevAhead); tid.Time().After(limit) {
		t.Fatalf("rev %s at %v: past log time + %v (%v); the clock is an hour fast", rev1, tid.Time(), MaxRevAhead, limit)
	}
	clk.SetSkew(-2 * time.Hour) // now an hour slow
	rev2, res := sign("i2", "3l3qo2vut0002")
	if !res.Accepted || rev2 <= rev1 {
		t.Fatalf("commit 2 with a slow clock: rev %s after %s, %s", rev2, rev1, res.Reason)
	}
	// Intents that are not net (the same path twice, a delete of nothing, the same
	// record again) are signed and applied; indigo accepts the whole chain.
	v0 := r.f.View()
	cm0 := chain.Commit{Seq: v0.Head.Seq + 1, Epoch: 1, Signer: "peerA", Prev: append([]byte(nil), v0.Head.Hash[:]...), Ops: Ops([]intentlog.Intent{
		{ID: "n1", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vut0009", Value: post(t, "a")},
		{ID: "n2", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vut0009", Value: post(t, "b")},
		{ID: "n3", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3l3qo2vut0404"},
		{ID: "n4", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vut0001", Value: post(t, "i1")},
	})}
	raw0, err := l.signCommit(v0, cm0)
	if err != nil {
		t.Fatalf("intents that are not net: %v", err)
	}
	if res := r.apply(intentlog.CommitEntry{Raw: raw0}); !res.Accepted {
		t.Fatalf("intents that are not net: %s", res.Reason)
	}
	r.commits[cm0.Seq] = raw0
	var raws [][]byte
	for seq := uint64(1); seq <= cm0.Seq; seq++ {
		raws = append(raws, r.commits[seq])
	}
	if _, err := indigocheck.Chain(context.Background(), raws, k.DID(), clk.Now().Add(2*time.Hour)); err != nil {
		t.Fatalf("indigo: %v", err)
	}
	// The cluster's clock not known yet (RevClock false): nothing is signed, the loop
	// tries again (errNoRevClock); the knob own-rev-clock takes the holder's own clock.
	l.cfg.RevClock = func() (time.Time, bool) { return time.Time{}, false }
	vw := r.f.View()
	cmw := chain.Commit{Seq: vw.Head.Seq + 1, Epoch: 1, Signer: "peerA", Prev: append([]byte(nil), vw.Head.Hash[:]...),
		Ops: Ops([]intentlog.Intent{{ID: "w1", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3l3qo2vut0005", Value: post(t, "w1")}})}
	if raw, err := l.signCommit(vw, cmw); !errors.Is(err, errNoRevClock) || raw != nil {
		t.Fatalf("signing with the cluster's clock unknown: %d bytes, %v", len(raw), err)
	}
	l.cfg.Knobs = &knobs.Signer{OwnRevClock: true}
	if _, err := l.signCommit(vw, cmw); err != nil {
		t.Fatalf("the knob own-rev-clock with the cluster's clock unknown: %v", err)
	}
	l.cfg.RevClock, l.cfg.Knobs = nil, nil
	// A repository read that is not the applied head's: nothing is signed.
	v := r.f.View()
	v.Head.Seq-- // as if the view were older than the repository
	cm := chain.Commit{Seq: v.Head.Seq + 1, Epoch: 1, Signer: "peerA", Ops: Ops([]intentlog.Intent{{ID: "i3", Op: intentlog.OpPut,
		Path: "app.bsky.feed.post/3l3qo2vut0003", Value: post(t, "i3")}})}
	cm.Prev = make([]byte, chain.HashSize)
	if _, err := l.signCommit(v, cm); !errors.Is(err, errRepoMoved) {
		t.Fatalf("signing on a repository of another head: %v", err)
	}
	// A version-1 chain: baton's format, the configured pipeline depth.
	if got := l.maxInFlight(intentlog.View{Genesis: intentlog.Genesis{Index: 1, Version: 1}}); got != 8 {
		t.Fatalf("maxInFlight on a version-1 chain: %d", got)
	}
}

// TestChainFormatOfDID: an Ed25519 did:key is a baton chain, a P-256 or a K-256 one an
// atproto chain; anything else is refused (a did:plc names a repository, not a
// chain key).
func TestChainFormatOfDID(t *testing.T) {
	ed, _ := chain.GenerateKey(nil)
	p, _ := atproto.GenerateKeyOf(atproto.KeyTypeP256)
	k, _ := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	for did, want := range map[string]uint64{ed.DID(): chain.FormatBaton, p.DID(): chain.FormatAtproto, k.DID(): chain.FormatAtproto} {
		if got, err := ChainFormatOfDID(did); err != nil || got != want {
			t.Errorf("%s: format %d, %v; want %d", did, got, err, want)
		}
	}
	for _, did := range []string{"", "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "did:key:zQ3sh", k.DID() + "x"} {
		if err := CheckChainDID(did); err == nil {
			t.Errorf("%q accepted as a chain key", did)
		}
	}
}

// TestAtprotoGenesisRepoDID: on a K-256 chain whose genesis names a did:plc, the loop
// signs the first commit with that DID (not the chain key's did:key), the apply
// refuses a first commit with any other DID (bad_repo), later commits keep it, and
// indigo accepts the chain. A genesis naming a malformed did:plc is refused.
func TestAtprotoGenesisRepoDID(t *testing.T) {
	const plc = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
	k, err := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	g := intentlog.GenesisEntry{Chain: k.DID(), Version: intentlog.CommitFormatAtproto,
		Nonce: bytes.Repeat([]byte{1}, intentlog.GenesisNonceLen), TS: t0.UnixMilli(), Repo: plc}
	bad := newFSMRun(t)
	bg := g
	bg.Repo = "did:plc:ewvi7nxzyoun6zhxrhs64oi0"
	if res := bad.apply(bg); res.Accepted || res.Reason != intentlog.ReasonBadEntry {
		t.Fatalf("genesis naming a malformed did:plc: %v %s", res.Accepted, res.Reason)
	}
	r := newFSMRun(t)
	r.commits = map[uint64][]byte{}
	if res := r.apply(g); !res.Accepted {
		t.Fatalf("genesis: %s", res.Reason)
	}
	if res := r.apply(intentlog.ClaimEntry{Holder: "peerA", Epoch: 1, TS: t0.UnixMilli(), TTL: 5000}); !res.Accepted {
		t.Fatalf("claim: %s", res.Reason)
	}
	clk := election.NewManualClock(t0)
	l := &Loop{cfg: LoopConfig{Key: k, Log: fsmChainLog{r: r}, Clock: clk, MaxInFlight: 1}, did: k.DID()}
	commit := func(id, rkey string) chain.Commit {
		v := r.f.View()
		cm := chain.Commit{Seq: v.Head.Seq + 1, Epoch: 1, Signer: "peerA", Time: clk.Now().UnixMilli(),
			Ops: Ops([]intentlog.Intent{{ID: id, Op: intentlog.OpPut, Path: "app.bsky.feed.post/" + rkey, Value: post(t, id)}})}
		if v.Head.Seq > 0 {
			cm.Prev = append([]byte(nil), v.Head.Hash[:]...)
		}
		return cm
	}
	// A first commit under the chain key's did:key (what the holder signed before the
	// genesis could name a repository) is refused.
	wrong, err := atproto.Propose(k, atproto.MemBlocks{}, atproto.Head{}, commit("w", "3l3qo2vut0000"), k.DID(), "3l3qo2vut2222")
	if err != nil {
		t.Fatal(err)
	}
	if res := r.apply(intentlog.CommitEntry{Raw: wrong}); res.Accepted || res.Reason != intentlog.ReasonBadRepo {
		t.Fatalf("first commit under the did:key: %v %s", res.Accepted, res.Reason)
	}
	for i, rkey := range []string{"3l3qo2vut0001", "3l3qo2vut0002"} {
		clk.Advance(time.Second)
		cm := commit(rkey, rkey)
		raw, err := l.signCommit(r.f.View(), cm)
		if err != nil {
			t.Fatal(err)
		}
		if res := r.apply(intentlog.CommitEntry{Raw: raw}); !res.Accepted {
			t.Fatalf("commit %d: %s", i+1, res.Reason)
		}
		r.commits[cm.Seq] = raw
		if e, _ := atproto.DecodeEnvelope(raw); e.Repo.DID != plc {
			t.Fatalf("commit %d signed for %s, want %s", i+1, e.Repo.DID, plc)
		}
	}
	if _, err := indigocheck.Chain(context.Background(), [][]byte{r.commits[1], r.commits[2]}, k.DID(), clk.Now().Add(time.Minute)); err != nil {
		t.Fatalf("indigo: %v", err)
	}
}
