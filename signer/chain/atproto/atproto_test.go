package atproto

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/fxamacker/cbor/v2"

	"github.com/batonhq/baton/signer/chain"
)

func TestFormatRegistered(t *testing.T) {
	f, err := chain.FormatOf(chain.FormatAtproto)
	if err != nil || f != Atproto || f.Name() != "atproto" || f.KeyType() != "p256" {
		t.Fatalf("FormatOf(3) = %v, %v", f, err)
	}
	k, _ := GenerateKey()
	if _, err := f.Sign(k, chain.Commit{Seq: 1}); !errors.Is(err, chain.ErrInvalidCommit) {
		t.Fatalf("unbound Sign = %v, want ErrInvalidCommit", err)
	}
}

func TestCheckRecord(t *testing.T) {
	good := record(t, "hi")
	if err := CheckRecord(good); err != nil {
		t.Fatal(err)
	}
	lnk, _ := encMode.Marshal(map[string]any{"ref": link(CIDOf(good))})
	if err := CheckRecord(lnk); err != nil {
		t.Fatalf("a record with a CID link: %v", err)
	}
	mk := func(v any) []byte {
		b, err := encMode.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bad := map[string][]byte{
		"float":        mk(map[string]any{"x": 1.5}),
		"tag 1":        mk(map[string]any{"x": cbor.Tag{Number: 1, Content: uint64(3)}}),
		"bignum":       mk(map[string]any{"x": new(big.Int).Lsh(big.NewInt(1), 70)}),
		"not a map":    mk([]any{"a"}),
		"int key":      mk(map[int]any{1: "a"}),
		"undefined":    {0xa1, 0x61, 'x', 0xf7},
		"indefinite":   {0xbf, 0x61, 'x', 0x01, 0xff},
		"unsorted":     {0xa2, 0x61, 'b', 0x01, 0x61, 'a', 0x01},
		"long int":     {0xa1, 0x61, 'x', 0x18, 0x01},
		"trailing":     append(append([]byte{}, good...), 0x00),
		"bad tag 42":   mk(map[string]any{"x": cbor.Tag{Number: 42, Content: []byte{1, 2}}}),
		"empty string": {},
	}
	for name, b := range bad {
		if err := CheckRecord(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRepoCommitMatchesIndigoShape: our commit block is byte-for-byte what indigo's
// cbor-gen code writes for the same commit (checked in indigo_test.go too); here the
// fixed layout: six keys in DAG-CBOR order, prev null.
func TestRepoCommitBytes(t *testing.T) {
	rc := RepoCommit{DID: testDID, Data: CIDOf([]byte{0xa0}), Rev: "3l3qo2vutsw2b", Sig: bytes.Repeat([]byte{1}, 64)}
	b, err := rc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRepoCommit(b)
	if err != nil || got.Rev != rc.Rev || !bytes.Equal(got.Data, rc.Data) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// Key order: did, rev, sig, data, prev, version (length first, then bytewise).
	var keys []string
	dec := cbor.NewDecoder(bytes.NewReader(b))
	var m map[string]cbor.RawMessage
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m["prev"], []byte{0xf6}) {
		t.Fatalf("prev = %x, want null", m["prev"])
	}
	_ = keys
	u, _ := rc.UnsignedBytes()
	if bytes.Contains(u, []byte("sig")) {
		t.Fatal("unsigned bytes carry sig")
	}
}

func propose(t *testing.T, k chain.Key, r *replica, c chain.Commit, rev string) []byte {
	t.Helper()
	c.Prev = nil
	if r.seq > 0 {
		c.Prev = r.hash[:]
	}
	c.Seq = r.seq + 1
	raw, err := Propose(k, r.bs, r.head, c, testDID, rev)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestApplyRefuses: the repository step refuses a second branch on one head (prevData),
// a rev that does not increase, a wrong root, a wrong op prev, a forged signature, a
// high-S signature and non-canonical envelopes; it applies intents that are not net
// (a no-op write, a delete of nothing, two on one path) with net event ops.
func TestApplyRefuses(t *testing.T) {
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica()
	put := func(id, path, text string) chain.Op {
		return chain.Op{ID: id, Kind: chain.Put, Path: path, Value: record(t, text)}
	}
	c1 := chain.Commit{Epoch: 1, Signer: "peerA", Time: 1, Ops: []chain.Op{put("i1", "app.bsky.feed.post/3l3qo2vutsw2b", "one")}}
	raw1 := propose(t, k, r, c1, "3l3qo2vutsw2b")
	if _, err := r.apply(raw1); err != nil {
		t.Fatal(err)
	}
	// Two commits built on one head (two holders, or one holder signing a seq twice):
	// once one is applied, the other's prevData is not the repository's data any more.
	base := *r
	base.bs = memBlocks{}
	for k, v := range r.bs {
		base.bs[k] = v
	}
	rawA := propose(t, k, r, chain.Commit{Epoch: 1, Signer: "peerA", Ops: []chain.Op{put("i2", "app.bsky.feed.post/3l3qo2vutsw2c", "two")}}, "3l3qo2vutsw2c")
	rawB := propose(t, k, &base, chain.Commit{Epoch: 1, Signer: "peerA", Ops: []chain.Op{put("i2b", "app.bsky.feed.post/3l3qo2vutsw2z", "two b")}}, "3l3qo2vutsw2d")
	if _, err := r.apply(rawA); err != nil {
		t.Fatal(err)
	}
	eB, err := DecodeEnvelope(rawB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(r.bs, r.head, eB); !errors.Is(err, ErrRefused) {
		t.Fatalf("second branch on one head: %v", err)
	}
	// rev not after the head's.
	if _, err := r.apply(propose(t, k, r, chain.Commit{Epoch: 1, Signer: "peerA", Ops: []chain.Op{put("i3", "app.bsky.feed.post/x", "x")}}, "3l3qo2vutsw2c")); !errors.Is(err, ErrRefused) {
		t.Fatalf("equal rev: %v", err)
	}
	// Intents that are not net are signed (the log accepted them: a holder that could
	// not sign them would stop the chain): a write of the same record again, a delete
	// of nothing, two intents on one path. The event's ops are net: one per path whose
	// record changed.
	dataBefore := r.head.Data
	noop := propose(t, k, r, chain.Commit{Epoch: 1, Signer: "peerA", Ops: []chain.Op{put("i4", "app.bsky.feed.post/3l3qo2vutsw2b", "one"),
		{ID: "i5", Kind: chain.Del, Path: "app.bsky.feed.post/nope"}}}, "3l3qo2vutsw2d")
	st, err := r.apply(noop)
	if err != nil {
		t.Fatalf("no-op intents: %v", err)
	}
	if len(st.Ops) != 0 || !bytes.Equal(st.Head.Data, dataBefore) {
		t.Fatalf("no-op intents changed the repository: %d ops", len(st.Ops))
	}
	twice := propose(t, k, r, chain.Commit{Epoch: 1, Signer: "peerA", Ops: []chain.Op{put("i5a", "app.bsky.feed.post/3l3qo2vutsw2y", "first"),
		put("i5b", "app.bsky.feed.post/3l3qo2vutsw2y", "second"), {ID: "i5c", Kind: chain.Del, Path: "app.bsky.feed.post/3l3qo2vutsw2c"},
		put("i5d", "app.bsky.feed.post/3l3qo2vutsw2c", "two")}}, "3l3qo2vutsw2e")
	st, err = r.apply(twice)
	if err != nil {
		t.Fatalf("two intents on one path: %v", err)
	}
	if len(st.Ops) != 1 || st.Ops[0].Action != "create" || !bytes.Equal(st.Ops[0].CID, CIDOf(record(t, "second"))) {
		t.Fatalf("net ops: %+v", st.Ops)
	}
	// Tampering with the envelope: wrong data, wrong op prev, bad sig, high-S.
	good := propose(t, k, r, chain.Commit{Epoch: 1, Signer: "peerA", Ops: []chain.Op{put("i6", "app.bsky.feed.post/3l3qo2vutsw2b", "one, edited")}}, "3l3qo2vutsw2f")
	_ = base
	e, err := DecodeEnvelope(good)
	if err != nil {
		t.Fatal(err)
	}
	resign := func(mut func(*RepoCommit, [][]byte)) []byte {
		rc := e.Repo
		prev := [][]byte{append([]byte(nil), e.OpPrev[0]...)}
		mut(&rc, prev)
		msg, _ := rc.UnsignedBytes()
		rc.Sig, _ = k.Sign(msg)
		block, _ := rc.Bytes()
		raw, err := encodeEnvelope(e.Commit, e.PrevData, prev, block)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	if _, err := r.apply(resign(func(rc *RepoCommit, _ [][]byte) { rc.Data = CIDOf([]byte{0xa0}) })); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong root: %v", err)
	}
	if _, err := r.apply(resign(func(_ *RepoCommit, p [][]byte) { p[0] = CIDOf([]byte("x")) })); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong op prev: %v", err)
	}
	if _, err := r.apply(resign(func(rc *RepoCommit, _ [][]byte) { rc.DID = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa" })); !errors.Is(err, ErrRefused) {
		t.Fatalf("other did: %v", err)
	}
	// Another key's signature.
	k2, _ := GenerateKey()
	forged := resign(func(*RepoCommit, [][]byte) {})
	fe, _ := DecodeEnvelope(forged)
	msg, _ := fe.Repo.UnsignedBytes()
	fe.Repo.Sig, _ = k2.Sign(msg)
	block, _ := fe.Repo.Bytes()
	forged, _ = encodeEnvelope(fe.Commit, fe.PrevData, fe.OpPrev, block)
	if _, err := r.apply(forged); chain.ReasonOf(err) != chain.ReasonBadSignature {
		t.Fatalf("another key's signature: %v", err)
	}
	// The same signature in high-S form verifies leniently but not strictly.
	hs := e.Repo
	s := new(big.Int).SetBytes(hs.Sig[32:])
	n, _ := new(big.Int).SetString("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551", 16)
	hs.Sig = append(hs.Sig[:32:32], new(big.Int).Sub(n, s).FillBytes(make([]byte, 32))...)
	hb, _ := hs.Bytes()
	hraw, _ := encodeEnvelope(e.Commit, e.PrevData, e.OpPrev, hb)
	if _, err := r.apply(hraw); chain.ReasonOf(err) != chain.ReasonBadSignature {
		t.Fatalf("high-S signature: %v", err)
	}
	// Non-canonical envelope: one more key.
	var m map[string]any
	if err := cbor.Unmarshal(good, &m); err != nil {
		t.Fatal(err)
	}
	m["zz"] = 1
	extra, _ := encMode.Marshal(m)
	if _, err := r.apply(extra); err == nil {
		t.Fatal("an envelope with an unknown key was accepted")
	}
	// And the good one still applies.
	if _, err := r.apply(good); err != nil {
		t.Fatal(err)
	}
}

func TestNextRev(t *testing.T) {
	const us = int64(1_700_000_000_000_000)
	r1, _ := NextRev(us, us+1e9, "", 7)
	// A clock behind the previous rev: prev + 1.
	r2, _ := NextRev(us-60e6, us+1e9, r1, 7)
	if r2 <= r1 {
		t.Fatalf("rev went back: %s after %s", r2, r1)
	}
	// A clock far ahead is bounded.
	r3, _ := NextRev(us+3600e6, us+1e6, r2, 7)
	r4, _ := NextRev(us+1e6, us+1e6, r2, 7)
	if r3 != r4 {
		t.Fatalf("clock not bounded: %s, want %s", r3, r4)
	}
}

// Issue 38 item 6: a TID holds 53 bits of unix microseconds, and indigo's NewTID masks
// the reading to them, so a clock before 1970 (a negative reading) made a rev in 2255
// that every later rev then had to follow (rev = prev + 1 forever after). A reading a
// TID cannot hold gives no time: the rev is prev + 1, or the Unix epoch's TID for a
// repository's first commit; never one derived from a negative time.
func TestNextRevClockBefore1970(t *testing.T) {
	const us = int64(1_700_000_000_000_000)
	year := func(rev string) int {
		t.Helper()
		tid, err := syntax.ParseTID(rev)
		if err != nil {
			t.Fatalf("rev %q: %v", rev, err)
		}
		return tid.Time().Year()
	}
	before1970 := time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC).UnixMicro()
	for _, now := range []int64{-1, before1970, math.MinInt64, 1 << 53, math.MaxInt64} {
		first, err := NextRev(now, now, "", 7)
		if err != nil {
			t.Fatal(err)
		}
		if y := year(first); y != 1970 {
			t.Fatalf("clock %d: first rev %s is in %d, want the Unix epoch's", now, first, y)
		}
		prev, _ := NextRev(us, us+1e9, "", 7)
		want := syntax.NewTIDFromInteger(syntax.TID(prev).Integer() + 1).String()
		bounds := []int64{now} // no log time yet: the clock is its own bound
		if now < 0 {
			bounds = append(bounds, us+1e9) // bounded by log time + 1 min
		}
		var next string
		for _, bound := range bounds {
			var err error
			if next, err = NextRev(now, bound, prev, 7); err != nil {
				t.Fatal(err)
			}
			if next != want {
				t.Fatalf("clock %d (bound %d) after %s: rev %s (%d), want prev + 1 %s", now, bound, prev, next, year(next), want)
			}
		}
		// And a later commit with a right clock is not held back by it.
		if later, _ := NextRev(us+1e6, us+1e9, next, 7); year(later) != 2023 {
			t.Fatalf("clock %d: the next rev with a right clock is %s (%d)", now, later, year(later))
		}
	}
}
