package intentlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func sampleEntries() []Entry {
	return []Entry{
		IntentsEntry{Intents: []Intent{put("id-1", "app.bsky.feed.post/3k", "hello"), del("id-2", "c/r"),
			{ID: "id-3", Op: OpPut, Path: "c/e", Value: []byte{}}}},
		IntentsEntry{Intents: []Intent{}},
		ClaimEntry{Holder: "12D3KooWA", Epoch: 7, PrevEpoch: 6, TS: 1_700_000_000_000, TTL: 3000},
		ClaimEntry{Holder: "h", Epoch: 2, PrevEpoch: 1, TS: -5, TTL: 1, Force: true, Reason: "wedged"},
		RenewEntry{Holder: "h", Epoch: 1 << 60, TS: 1},
		ReleaseEntry{Holder: "h", Epoch: 0},
		TransferEntry{Holder: "h", Epoch: 3, To: "g", TS: 99},
		CommitEntry{Raw: []byte{0xa1, 0x00, 0xff}},
		CommitEntry{Raw: []byte{}},
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
		// Every strict prefix is rejected, and so is any trailing byte.
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T prefix %d accepted", e, i)
			}
		}
		if _, err := Decode(append(append([]byte{}, b...), 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%T with trailing byte accepted", e)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(RenewEntry{Holder: "h", Epoch: 1, TS: 1})
	bad := map[string][]byte{
		"empty":           {},
		"unknown version": append([]byte{2}, good[1:]...),
		"unknown kind":    {CodecVersion, 42},
		"result kind":     {CodecVersion, kindResult},
		// holder length 1<<40 with three bytes of input
		"huge length": append([]byte{CodecVersion, kindRenew}, binary.AppendUvarint(nil, 1<<40)...),
		// 1<<30 intents announced in a short entry must not allocate
		"huge count":        append([]byte{CodecVersion, kindIntents}, binary.AppendUvarint(nil, 1<<30)...),
		"noncanonical uvar": {CodecVersion, kindRelease, 0x81, 0x00, 'h', 0x01},
		"bad bool":          {CodecVersion, kindClaim, 1, 'h', 2, 1, 0, 2, 7, 0},
		"bad value flag":    {CodecVersion, kindIntents, 1, 1, 1, 'i', 3, 'c', '/', 'r', 5},
		"overflow varint":   {CodecVersion, kindRelease, 1, 'h', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	for name, b := range bad {
		if e, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decoded %#v, err %v", name, e, err)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	res := Result{Index: 9, Accepted: true, Intents: []IntentResult{
		{ID: "a", Accepted: true, Index: 9, Seq: 3, Duplicate: true},
		{ID: "b", Reason: ReasonBadPath},
	}, Lease: Lease{Holder: "h", Epoch: 2, TS: -1, TTL: 3}, Head: Head{Seq: 3, Epoch: 2, Signer: "h"}}
	res.Head.Hash[0], res.Head.Hash[31] = 1, 2
	b := EncodeResult(res)
	got, err := DecodeResult(b)
	if err != nil || !reflect.DeepEqual(got, res) {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	for i := 0; i < len(b); i++ {
		if _, err := DecodeResult(b[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix %d accepted", i)
		}
	}
	if _, err := DecodeResult(append(b, 0)); !errors.Is(err, ErrMalformed) {
		t.Fatal("trailing byte accepted")
	}
	e, _ := Encode(ReleaseEntry{Holder: "h"})
	if _, err := DecodeResult(e); !errors.Is(err, ErrMalformed) {
		t.Fatal("an entry decoded as a result")
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
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
		} else {
			again, err := Encode(e)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("accepted non-canonical input %x (re-encodes to %x)", b, again)
			}
		}
		if res, err := DecodeResult(b); err == nil && !bytes.Equal(EncodeResult(res), b) {
			t.Fatalf("result not canonical: %x", b)
		}
	})
}
