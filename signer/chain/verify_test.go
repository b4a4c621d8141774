package chain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// entry is one key/value pair of a CBOR map, as raw bytes.
type entry struct{ k, v []byte }

// entries splits a definite-length CBOR map into its raw pairs, in encoded order.
func entries(t *testing.T, raw []byte) []entry {
	t.Helper()
	if raw[0]>>5 != majMap || raw[0]&0x1f >= 24 {
		t.Fatalf("not a small definite map: %x", raw[0])
	}
	n := int(raw[0] & 0x1f)
	dec := cbor.NewDecoder(bytes.NewReader(raw[1:]))
	var out []entry
	for range n {
		var k, v cbor.RawMessage
		if err := dec.Decode(&k); err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{append([]byte(nil), k...), append([]byte(nil), v...)})
	}
	return out
}

// mapOf assembles a definite-length map of the given pairs, in the given order.
func mapOf(es []entry) []byte {
	b := []byte{byte(majMap<<5 | len(es))}
	for _, e := range es {
		b = append(b, e.k...)
		b = append(b, e.v...)
	}
	return b
}

func keyOf(t *testing.T, e entry) string {
	var s string
	if err := cbor.Unmarshal(e.k, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// with returns a copy of es with key's value replaced by v (or removed when v is nil).
func with(t *testing.T, es []entry, key string, v []byte) []entry {
	var out []entry
	for _, e := range es {
		if keyOf(t, e) == key {
			if v == nil {
				continue
			}
			e.v = v
		}
		out = append(out, e)
	}
	return out
}

func valueOf(t *testing.T, es []entry, key string) []byte {
	for _, e := range es {
		if keyOf(t, e) == key {
			return e.v
		}
	}
	t.Fatalf("no key %q", key)
	return nil
}

func mustEnc(t *testing.T, v any) []byte {
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resign replaces sig with a valid signature over the (canonical) map without sig,
// so that a test reaches the check it targets rather than bad_signature.
func resign(t *testing.T, k *Ed25519Key, es []entry) []byte {
	unsigned := mapOf(with(t, es, "sig", nil))
	sig, _ := k.Sign(unsigned)
	return mapOf(with(t, es, "sig", mustEnc(t, sig)))
}

func TestVerifyAcceptsGolden(t *testing.T) {
	c, k := goldenCommit(t)
	raw, _ := Sign(k, c)
	got, err := Verify(raw, k.DID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 2 || got.Epoch != 5 || len(got.Ops) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	// The test helpers rebuild the golden bytes exactly, so the variants below differ
	// from it only where intended.
	if !bytes.Equal(mapOf(entries(t, raw)), raw) || !bytes.Equal(resign(t, k, entries(t, raw)), raw) {
		t.Fatal("entries/mapOf/resign do not round-trip the golden commit")
	}
}

func TestVerifyRejectsEveryChangedByte(t *testing.T) {
	c, k := goldenCommit(t)
	raw, _ := Sign(k, c)
	for i := range raw {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(raw)
			bad[i] ^= x
			if _, err := Verify(bad, k.DID()); err == nil {
				t.Fatalf("byte %d ^ %#x accepted", i, x)
			} else if ReasonOf(err) == "" {
				t.Fatalf("byte %d ^ %#x: error without a reason: %v", i, x, err)
			}
		}
	}
	for n := range len(raw) {
		if _, err := Verify(raw[:n], k.DID()); ReasonOf(err) == "" {
			t.Fatalf("truncation to %d bytes: %v", n, err)
		}
	}
}

func TestVerifyRejectsTampered(t *testing.T) {
	c, k := goldenCommit(t)
	raw, _ := Sign(k, c)
	es := entries(t, raw)
	ops := valueOf(t, es, "ops")
	opEntries := func() [][]byte { // the two op maps, raw
		dec := cbor.NewDecoder(bytes.NewReader(ops[1:]))
		var a, b cbor.RawMessage
		if err := dec.Decode(&a); err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(&b); err != nil {
			t.Fatal(err)
		}
		return [][]byte{a, b}
	}()
	reversed := make([]entry, len(es))
	for i, e := range es {
		reversed[len(es)-1-i] = e
	}
	indefMap := append([]byte{0xbf}, mapOf(es)[1:]...)
	indefMap = append(indefMap, 0xff)
	indefOps := append(append([]byte{0x9f}, ops[1:]...), 0xff)
	chain := []byte(k.DID())
	indefChain := append(append([]byte{0x7f}, mustEnc(t, string(chain[:10]))...), mustEnc(t, string(chain[10:]))...)
	indefChain = append(indefChain, 0xff)
	floatTime := make([]byte, 9)
	floatTime[0] = 0xfb
	binary.BigEndian.PutUint64(floatTime[1:], math.Float64bits(1.75e12))
	other := testKey(t, 7)
	otherRaw, _ := Sign(other, c)
	forged := func() []byte { // claims k's chain, signed by other
		fc := c
		fc.Chain, fc.Version = k.DID(), 1
		msg, _ := SigningBytes(fc)
		fc.Sig, _ = other.Sign(msg)
		b, _ := Encode(fc)
		return b
	}()
	putNoVal := func() []byte { // op 0 is a put: drop its val
		var m map[string]cbor.RawMessage
		_ = cbor.Unmarshal(opEntries[0], &m)
		delete(m, "val")
		b, _ := encMode.Marshal(m)
		arr := append(append([]byte{0x82}, b...), opEntries[1]...)
		return resign(t, k, with(t, es, "ops", arr))
	}()
	delWithVal := func() []byte { // op 1 is a del: give it a val
		var m map[string]cbor.RawMessage
		_ = cbor.Unmarshal(opEntries[1], &m)
		m["val"] = mustEnc(t, []byte("x"))
		b, _ := encMode.Marshal(m)
		arr := append(append([]byte{0x82}, opEntries[0]...), b...)
		return resign(t, k, with(t, es, "ops", arr))
	}()
	opUnknown := func() []byte {
		var m map[string]cbor.RawMessage
		_ = cbor.Unmarshal(opEntries[1], &m)
		m["zz"] = mustEnc(t, 1)
		b, _ := encMode.Marshal(m)
		return resign(t, k, with(t, es, "ops", append(append([]byte{0x82}, opEntries[0]...), b...)))
	}()
	opBadName := func() []byte {
		var m map[string]cbor.RawMessage
		_ = cbor.Unmarshal(opEntries[1], &m)
		m["op"] = mustEnc(t, "delete")
		b, _ := encMode.Marshal(m)
		return resign(t, k, with(t, es, "ops", append(append([]byte{0x82}, opEntries[0]...), b...)))
	}()

	cases := []struct {
		name  string
		raw   []byte
		chain string
		want  VerifyReason
	}{
		{"reordered ops", mapOf(with(t, es, "ops", append(append([]byte{0x82}, opEntries[1]...), opEntries[0]...))), "", ReasonBadSignature},
		{"dropped op", mapOf(with(t, es, "ops", append([]byte{0x81}, opEntries[0]...))), "", ReasonBadSignature},
		{"changed prev", mapOf(with(t, es, "prev", mustEnc(t, bytes.Repeat([]byte{0x22}, 32)))), "", ReasonBadSignature},
		{"changed epoch", mapOf(with(t, es, "epoch", mustEnc(t, 6))), "", ReasonBadSignature},
		{"changed signer", mapOf(with(t, es, "signer", mustEnc(t, "12D3KooWOther"))), "", ReasonBadSignature},
		{"forged by another key", forged, "", ReasonBadSignature},
		{"other chain", otherRaw, "", ReasonWrongChain},
		{"bad chain did", raw, "did:key:zNope", ReasonBadChainKey},
		{"unsorted keys", mapOf(reversed), "", ReasonNonCanonical},
		{"indefinite map", indefMap, "", ReasonNonCanonical},
		{"indefinite ops array", mapOf(with(t, es, "ops", indefOps)), "", ReasonNonCanonical},
		{"indefinite text", mapOf(with(t, es, "chain", indefChain)), "", ReasonNonCanonical},
		{"non-minimal uint", mapOf(with(t, es, "seq", []byte{0x18, 0x02})), "", ReasonNonCanonical},
		{"non-minimal uint64", mapOf(with(t, es, "epoch", []byte{0x1b, 0, 0, 0, 0, 0, 0, 0, 5})), "", ReasonNonCanonical},
		{"duplicate key", append([]byte{0xaa}, append(mapOf(es)[1:], mapOf(es[:1])[1:]...)...), "", ReasonMalformed},
		{"unknown key", append([]byte{0xaa}, append(mapOf(es)[1:], mapOf([]entry{{mustEnc(t, "x"), mustEnc(t, 1)}})[1:]...)...), "", ReasonUnknownKey},
		{"missing time", mapOf(with(t, es, "time", nil)), "", ReasonMissingKey},
		{"missing sig", mapOf(with(t, es, "sig", nil)), "", ReasonMissingKey},
		{"time as float", mapOf(with(t, es, "time", floatTime)), "", ReasonBadType},
		{"chain as bytes", mapOf(with(t, es, "chain", mustEnc(t, chain))), "", ReasonBadType},
		{"negative seq", mapOf(with(t, es, "seq", mustEnc(t, -2))), "", ReasonBadType},
		{"null seq", mapOf(with(t, es, "seq", []byte{0xf6})), "", ReasonBadType},
		{"ops as map", mapOf(with(t, es, "ops", []byte{0xa0})), "", ReasonBadType},
		{"op not a map", mapOf(with(t, es, "ops", []byte{0x81, 0x01})), "", ReasonBadType},
		{"version 2", resign(t, k, with(t, es, "v", mustEnc(t, 2))), "", ReasonBadVersion},
		{"seq 0", resign(t, k, with(t, es, "seq", mustEnc(t, 0))), "", ReasonBadSeq},
		{"null prev at seq 2", resign(t, k, with(t, es, "prev", []byte{0xf6})), "", ReasonBadPrev},
		{"short prev", resign(t, k, with(t, es, "prev", mustEnc(t, make([]byte, 31)))), "", ReasonBadPrev},
		{"empty sig", mapOf(with(t, es, "sig", []byte{0x40})), "", ReasonBadSignature},
		{"put without val", putNoVal, "", ReasonBadOp},
		{"del with val", delWithVal, "", ReasonBadOp},
		{"op with unknown key", opUnknown, "", ReasonUnknownKey},
		{"op named delete", opBadName, "", ReasonBadOp},
		{"trailing byte", append(bytes.Clone(raw), 0x00), "", ReasonMalformed},
		{"tagged", append([]byte{0xd8, 0x18}, raw...), "", ReasonMalformed},
		{"array", []byte{0x80}, "", ReasonMalformed},
		{"null", []byte{0xf6}, "", ReasonMalformed},
		{"empty", nil, "", ReasonMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chain := tc.chain
			if chain == "" {
				chain = k.DID()
			}
			_, err := Verify(tc.raw, chain)
			if got := ReasonOf(err); got != tc.want {
				t.Fatalf("Verify: reason %q (%v), want %q", got, err, tc.want)
			}
			// The apply's adapter refuses it too.
			if _, err := Verifier(chain)(tc.raw); err == nil {
				t.Fatal("Verifier accepted it")
			}
		})
	}
}

func TestVerifyChain(t *testing.T) {
	k := testKey(t, 0)
	good := buildChain(t, k, 1, 1, 2, 2, 5)
	if err := VerifyChain(good, k.DID()); err != nil {
		t.Fatal(err)
	}
	if err := VerifyChain(nil, k.DID()); err != nil {
		t.Fatalf("empty chain: %v", err)
	}
	// A commit signed on a wrong prev (a fork) and a gap.
	fork := func() [][]byte {
		raws := bytes2(good)
		raw, err := Sign(k, Commit{Seq: 4, Epoch: 2, Signer: "x", Prev: bytes.Repeat([]byte{9}, 32), Ops: testOps(4, 1)})
		if err != nil {
			t.Fatal(err)
		}
		raws[3] = raw
		return raws
	}()
	decreasing := buildChain(t, k, 1, 3, 2)
	notFirst := good[1:]
	foreign := buildChain(t, testKey(t, 3), 1, 1)
	cases := []struct {
		name   string
		raws   [][]byte
		reason VerifyReason
		seq    uint64
		index  int
	}{
		{"broken link", fork, ReasonBadPrev, 4, 3},
		{"seq gap", append(bytes2(good[:2]), good[3:]...), ReasonBadSeq, 4, 2},
		{"repeated commit", append(bytes2(good[:3]), good[2:]...), ReasonBadSeq, 3, 3},
		{"decreasing epoch", decreasing, ReasonEpochDecreased, 3, 2},
		{"does not start at seq 1", notFirst, ReasonBadSeq, 2, 0},
		{"foreign chain", foreign, ReasonWrongChain, 1, 0},
		{"corrupt member", append(bytes2(good[:1]), []byte{0xa0}), ReasonMissingKey, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyChain(tc.raws, k.DID())
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("VerifyChain = %v, want *VerifyError", err)
			}
			if ve.Reason != tc.reason || ve.Seq != tc.seq || ve.Index != tc.index {
				t.Fatalf("VerifyChain = %v (reason %s seq %d index %d), want %s seq %d index %d", err, ve.Reason, ve.Seq, ve.Index, tc.reason, tc.seq, tc.index)
			}
		})
	}
}

func TestChainVerifierFromHead(t *testing.T) {
	k := testKey(t, 0)
	raws := buildChain(t, k, 1, 1, 2, 3)
	cv, err := NewChainVerifier(k.DID(), Head{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raws[:2] {
		if _, err := cv.Next(r); err != nil {
			t.Fatal(err)
		}
	}
	mid := cv.Head()
	if mid.Seq != 2 || mid.Hash != Hash(raws[1]) || mid.Epoch != 1 {
		t.Fatalf("head %+v", mid)
	}
	rest, err := NewChainVerifier(k.DID(), mid)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raws[2:] {
		if _, err := rest.Next(r); err != nil {
			t.Fatal(err)
		}
	}
	// Errors are sticky.
	if _, err := rest.Next(raws[0]); ReasonOf(err) != ReasonBadSeq {
		t.Fatalf("replay of seq 1: %v", err)
	}
	if _, err := rest.Next(buildChain(t, k, 1, 1, 2, 3, 3)[4]); ReasonOf(err) != ReasonBadSeq {
		t.Fatalf("after an error, Next = %v, want the first error again", err)
	}
	if _, err := NewChainVerifier("did:key:nope", Head{}); ReasonOf(err) != ReasonBadChainKey {
		t.Fatalf("NewChainVerifier(bad did) = %v", err)
	}
}

func bytes2(in [][]byte) [][]byte { return append([][]byte(nil), in...) }

func FuzzDecodeVerify(f *testing.F) {
	k := testKey(f, 0)
	for _, r := range buildChain(f, k, 1, 2) {
		f.Add(r)
	}
	c := Commit{Seq: 1, Signer: "p", Ops: []Op{{ID: "a", Kind: Put, Path: "a/b", Value: []byte{}}}}
	if r, err := Sign(k, c); err == nil {
		f.Add(r)
	}
	f.Add([]byte{0xa0})
	f.Add([]byte{0xbf, 0xff})
	did := k.DID()
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Decode(raw)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("Decode error without reason: %v", err)
			}
			return
		}
		// Anything Decode accepts is canonical: it re-encodes to the same bytes.
		re, err := Encode(c)
		if err != nil || !bytes.Equal(re, raw) {
			t.Fatalf("accepted bytes do not re-encode (err %v)", err)
		}
		if _, err := Verify(raw, did); err != nil && ReasonOf(err) == "" {
			t.Fatalf("Verify error without reason: %v", err)
		}
	})
}

func BenchmarkSign(b *testing.B) {
	k := testKey(b, 0)
	c := Commit{Seq: 2, Epoch: 1, Signer: "12D3KooWbench", Prev: make([]byte, 32), Ops: testOps(2, 16), Time: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Sign(k, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	k := testKey(b, 0)
	raw, err := Sign(k, Commit{Seq: 2, Epoch: 1, Signer: "12D3KooWbench", Prev: make([]byte, 32), Ops: testOps(2, 16), Time: 1})
	if err != nil {
		b.Fatal(err)
	}
	v := Verifier(k.DID())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifySelf is what the apply runs for every commit (the key from the
// commit's own chain field): 16 ops of 200-byte values.
func BenchmarkVerifySelf(b *testing.B) {
	k := testKey(b, 0)
	ops := testOps(2, 16)
	for i := range ops {
		if ops[i].Kind == Put {
			ops[i].Value = bytes.Repeat([]byte{'v'}, 200)
		}
	}
	raw, err := Sign(k, Commit{Seq: 2, Epoch: 1, Signer: "12D3KooWbench", Prev: make([]byte, 32), Ops: ops, Time: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifySelf(raw); err != nil {
			b.Fatal(err)
		}
	}
}
