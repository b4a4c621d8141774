package intentlog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

func sampleEntries() []Entry {
	return []Entry{
		IntentsEntry{Intents: []Intent{put("id-1", "app.bsky.feed.post/3k", "hello"), del("id-2", "c/r"),
			{ID: "id-3", Op: OpPut, Path: "c/e", Value: []byte{}}}},
		IntentsEntry{Intents: []Intent{}},
		ClaimEntry{Holder: "12D3KooWA", Epoch: 7, PrevRev: 6000, TS: 1_700_000_000_000, TTL: 3000},
		ClaimEntry{Holder: "h", Epoch: 2, PrevRev: 1, TS: -5, TTL: 1, Force: true, Reason: "wedged"},
		ClaimEntry{Holder: "12D3KooWA", Epoch: 8, PrevRev: 6001, TS: 1_700_000_000_000, TTL: 3000, Nonce: 0xfedc_ba98_7654_3210},
		ClaimEntry{Holder: "h", Epoch: 2, PrevRev: 1, TS: 1, TTL: 1, Force: true, Reason: "r", Nonce: 1},
		RenewEntry{Holder: "h", Epoch: 1 << 60, PrevRev: 1 << 62, TS: 1},
		ReleaseEntry{Holder: "h", Epoch: 0},
		TransferEntry{Holder: "h", Epoch: 3, PrevRev: 17, To: "g", TS: 99},
		CommitEntry{Raw: []byte{0xa1, 0x00, 0xff}},
		CommitEntry{Raw: []byte{}},
		GenesisEntry{Chain: "did:key:z6Mk", Version: 1, Nonce: bytes.Repeat([]byte{7}, 16), TS: 1_700_000_000_000, Retention: 86_400_000, MaxIDs: 1 << 20},
		GenesisEntry{Chain: "", Version: 0, Nonce: []byte{}, TS: -1},
		GenesisEntry{Chain: "did:key:zQ3sh", Version: 3, Nonce: bytes.Repeat([]byte{9}, 16), TS: 5, Repo: "did:plc:ewvi7nxzyoun6zhxrhs64oiz"},
	}
}

// TestGenesisRepoCodec: a genesis written before Repo existed (bytes of that build)
// decodes to the same entry with no Repo and re-encodes to the same bytes (so its
// genesis hash is unchanged); a Repo is encoded after MaxIDs, only when set: a present
// but empty one is not canonical and refused.
func TestGenesisRepoCodec(t *testing.T) {
	old, _ := hex.DecodeString("0307116469643a6b65793a7a446e61655469713403100707070707070707070707070707070780a0abfef96280f0b2528080406a49e305")
	e, err := Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	want := GenesisEntry{Chain: "did:key:zDnaeTiq4", Version: 3, Nonce: bytes.Repeat([]byte{7}, 16), TS: 1_700_000_000_000, Retention: 86_400_000, MaxIDs: 1 << 20,
		ver: CodecVersionV3}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("old genesis decodes to %#v", e)
	}
	if again, _ := Encode(e); !bytes.Equal(again, old) {
		t.Fatalf("old genesis re-encodes to %x", again)
	}
	with := want
	with.Repo = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
	b, _ := Encode(with)
	if !bytes.Equal(b[:len(old)-crcSize], old[:len(old)-crcSize]) {
		t.Fatal("a genesis with a repo does not extend the bytes of one without")
	}
	body := append([]byte{}, old[:len(old)-crcSize]...)
	w := &wbuf{b: append(body, 0)} // a Repo of length 0
	w.seal()
	if _, err := Decode(w.b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a present but empty repo: %v", err)
	}
}

// TestClaimNonceCodec: a claim written before ClaimEntry.Nonce existed (bytes of that
// build) decodes to the same entry with no nonce and re-encodes to the same bytes; a
// nonce is encoded after Reason, only when set: a present nonce of 0 is not canonical
// and refused.
func TestClaimNonceCodec(t *testing.T) {
	old, _ := hex.DecodeString("040209313244334b6f6f574107f02e80a0abfef962f02e00009b56074d")
	e, err := Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	want := ClaimEntry{Holder: "12D3KooWA", Epoch: 7, PrevRev: 6000, TS: 1_700_000_000_000, TTL: 3000}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("old claim decodes to %#v", e)
	}
	if again, _ := Encode(e); !bytes.Equal(again, old) {
		t.Fatalf("old claim re-encodes to %x", again)
	}
	with := want
	with.Nonce = 1 << 40
	b, _ := Encode(with)
	if !bytes.Equal(b[:len(old)-crcSize], old[:len(old)-crcSize]) {
		t.Fatal("a claim with a nonce does not extend the bytes of one without")
	}
	if got, err := Decode(b); err != nil || !reflect.DeepEqual(got, with) {
		t.Fatalf("claim with a nonce decodes to %#v, %v", got, err)
	}
	body := append([]byte{}, old[:len(old)-crcSize]...)
	w := &wbuf{b: append(body, 0)} // a nonce of 0
	w.seal()
	if _, err := Decode(w.b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a present nonce of 0: %v", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, e := range sampleEntries() {
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != CodecVersion {
			t.Fatalf("version byte %d", b[0])
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, e)
		}
		// Every strict prefix is rejected, and so is any trailing byte (a cut or grown
		// v2 entry fails its checksum, or is too short to have one).
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%T prefix %d accepted", e, i)
			}
		}
		if _, err := Decode(append(append([]byte{}, b...), 0)); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%T with trailing byte accepted", e)
		}
	}
}

// sealed returns a version-2 encoding of body (kind and fields) with a valid checksum.
func sealed(body ...byte) []byte {
	w := &wbuf{b: append([]byte{CodecVersion}, body...)}
	w.seal()
	return w.b
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(RenewEntry{Holder: "h", Epoch: 1, TS: 1})
	bodies := map[string][]byte{
		"unknown kind": {42},
		"result kind":  {kindResult},
		// holder length 1<<40 with three bytes of input
		"huge length": append([]byte{kindRenew}, binary.AppendUvarint(nil, 1<<40)...),
		// 1<<30 intents announced in a short entry must not allocate
		"huge count":        append([]byte{kindIntents}, binary.AppendUvarint(nil, 1<<30)...),
		"noncanonical uvar": {kindRelease, 0x81, 0x00, 'h', 0x01, 0},
		"bad bool":          {kindClaim, 1, 'h', 2, 1, 0, 2, 7, 0},
		"bad value flag":    {kindIntents, 1, 1, 1, 'i', 3, 'c', '/', 'r', 5},
		"overflow varint":   {kindRelease, 1, 'h', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	bad := map[string][]byte{
		"empty":           {},
		"unknown version": append([]byte{CodecVersion + 1}, good[1:len(good)-crcSize]...),
		"short v2":        {CodecVersion, kindRelease, 0, 0},
		"v1 unknown kind": {CodecVersionV1, 42},
		"v1 trailing":     {CodecVersionV1, kindRelease, 1, 'h', 1, 0},
	}
	for name, b := range bodies {
		bad[name] = sealed(b...)
		bad["v1 "+name] = append([]byte{CodecVersionV1}, b...)
	}
	for name, b := range bad {
		if e, err := Decode(b); !errors.Is(err, ErrMalformed) || errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded %#v, err %v; want ErrMalformed", name, e, err)
		}
	}
}

// A version-2 entry whose bytes changed decodes to ErrCorrupt, never to a different
// entry and never to ErrMalformed: whichever byte changed, version byte included.
func TestDecodeCorrupt(t *testing.T) {
	for _, e := range sampleEntries() {
		b, _ := Encode(e)
		for i := range b {
			for _, bit := range []byte{0x01, 0x80} {
				c := append([]byte{}, b...)
				c[i] ^= bit
				if got, err := Decode(c); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrMalformed) {
					t.Fatalf("%T with byte %d ^ %#x: %#v, %v; want ErrCorrupt", e, i, bit, got, err)
				}
			}
		}
	}
}

// Version-1 entries (what older builds wrote) decode with their own layouts, keep
// their version, and encode back to the same bytes.
func TestDecodeV1(t *testing.T) {
	cases := []struct {
		hex  string
		want Entry
	}{
		// From testdata/v1/log.txt (commit a51a2ca).
		{"010201610100d00fb0ea010000", legacyClaim(ClaimEntry{Holder: "a", Epoch: 1, TS: 1000, TTL: 15000}, 0)},
		{"010201620201a09c01b0ea010000", legacyClaim(ClaimEntry{Holder: "b", Epoch: 2, TS: 10000, TTL: 15000}, 1)},
		{"0103016101807d", RenewEntry{Holder: "a", Epoch: 1, TS: 8000, v1: true}},
		{"0104016101", ReleaseEntry{Holder: "a", Epoch: 1, v1: true}},
		{"01050162020161f0ab01", TransferEntry{Holder: "b", Epoch: 2, To: "a", TS: 11000, v1: true}},
		{"0101010102693703642f3701077065" + "6e64696e67", IntentsEntry{Intents: []Intent{put("i7", "d/7", "pending")}, v1: true}},
		{"010603616263", CommitEntry{Raw: []byte("abc"), v1: true}},
	}
	for _, tc := range cases {
		b, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.hex, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", tc.hex, got, tc.want)
		}
		again, err := Encode(got)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%s re-encodes to %x, %v", tc.hex, again, err)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	res := Result{Index: 9, Accepted: true, Intents: []IntentResult{
		{ID: "a", Accepted: true, Index: 9, Seq: 3, Duplicate: true, Hash: [32]byte{7, 31: 9}, LogTime: 1_700_000_000_123},
		{ID: "b", Reason: ReasonBadPath, LogTime: -4},
	}, Lease: Lease{Holder: "h", Epoch: 2, TS: -1, TTL: 3, Rev: 8}, Head: Head{Seq: 3, Epoch: 2, Signer: "h"}}
	res.Head.Hash[0], res.Head.Hash[31] = 1, 2
	b := EncodeResult(res)
	got, err := DecodeResult(b)
	if err != nil || !reflect.DeepEqual(got, res) {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	for i := 0; i < len(b); i++ {
		if _, err := DecodeResult(b[:i]); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix %d accepted", i)
		}
	}
	if _, err := DecodeResult(append(b, 0)); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrCorrupt) {
		t.Fatal("trailing byte accepted")
	}
	e, _ := Encode(ReleaseEntry{Holder: "h"})
	if _, err := DecodeResult(e); !errors.Is(err, ErrMalformed) {
		t.Fatal("an entry decoded as a result")
	}
	// The record's nonce comes after the head, only when set.
	withNonce := res
	withNonce.Lease.Nonce = 77
	if nb := EncodeResult(withNonce); !bytes.Equal(nb[:len(b)-crcSize], b[:len(b)-crcSize]) {
		t.Fatal("a result with a nonce does not extend the bytes of one without")
	} else if got, err := DecodeResult(nb); err != nil || !reflect.DeepEqual(got, withNonce) {
		t.Fatalf("result with a nonce: %+v, %v", got, err)
	}
	zero := &wbuf{b: append(append([]byte{}, b[:len(b)-crcSize]...), 0)}
	zero.seal()
	if _, err := DecodeResult(zero.b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a result with a present nonce of 0: %v", err)
	}
	rejected := Result{Index: 1, Reason: ReasonMalformed}
	if got, err := DecodeResult(EncodeResult(rejected)); err != nil || !reflect.DeepEqual(got, rejected) {
		t.Fatalf("rejected result %+v, %v", got, err)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to the same bytes
// (the encoding is canonical, so replicas cannot disagree about an entry's meaning).
func FuzzDecode(f *testing.F) {
	for _, e := range sampleEntries() {
		b, _ := Encode(e)
		f.Add(b)
	}
	f.Add(EncodeResult(Result{Index: 1, Intents: []IntentResult{{ID: "x"}}}))
	for _, e := range sampleEntries() {
		if b, err := encodeV1(e); err == nil {
			f.Add(b)
		}
		for _, v := range []byte{CodecVersionV3, CodecVersionV2} {
			if b, err := Encode(markVersion(e, v)); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if errors.Is(err, ErrMalformed) == errors.Is(err, ErrCorrupt) {
				t.Fatalf("error neither or both of ErrMalformed and ErrCorrupt: %v", err)
			}
		} else {
			again, err := Encode(e)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("accepted non-canonical input %x (re-encodes to %x)", b, again)
			}
		}
		if res, err := DecodeResult(b); err == nil {
			again := EncodeResult(res)
			if b[0] == CodecVersion && !bytes.Equal(again, b) {
				t.Fatalf("result not canonical: %x", b)
			}
			// A v1 result (an older leader's) re-encodes as v2 with the same meaning.
			if back, err := DecodeResult(again); err != nil || !reflect.DeepEqual(back, res) {
				t.Fatalf("result %x re-encodes to %x, which decodes to %+v, %v", b, again, back, err)
			}
		}
	})
}
