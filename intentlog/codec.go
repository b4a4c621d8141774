package intentlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The entry encoding. Version 4 (what Encode writes), 3 and 2 share one layout:
//
//	version byte (4, 3 or 2) | kind byte | fields | CRC-32C (Castagnoli) of everything before, 4 bytes big-endian
//
// They differ only in how the apply moves log time: a version-2 entry moves it to its
// timestamp however far ahead, a version-3 entry by at most one bounded step from the
// last stamp whoever wrote it, a version-4 entry by at most one bounded step from the
// last stamp of the same writer, and by nothing when the writer changed (see
// applier.advance). Each keeps its rule on replay.
//
// Version 1 (still decoded, so that existing logs replay identically; never written
// for a new entry):
//
//	version byte (1) | kind byte | fields
//
// Integers are canonical (minimal) uvarints, signed integers zigzag varints, strings and
// byte strings a uvarint length then the bytes, booleans one byte 0 or 1, and optional
// byte strings a presence byte (0 absent, 1 present) then the byte string. Decode
// accepts exactly what Encode produces: it rejects trailing bytes, unknown versions and
// kinds, non-canonical integers and lengths beyond the input, and never allocates more
// than the input's size.
//
// The versions differ in the lease entries' fields: a v2 Claim carries PrevRev (the
// stored lease record's revision) where a v1 Claim carried PrevEpoch, and v2 Renew,
// Release and Transfer carry PrevRev, which v1 did not have. The apply keeps the v1
// rules for v1 entries (determinism is per entry bytes): see ClaimEntry.
//
// A version-4 Claim may end with a nonce (ClaimEntry.Nonce), written only when set: a
// claim without one has the bytes builds before it wrote, and those builds refuse a
// claim that carries one as malformed (upgrade every device together). A Result
// likewise ends with its lease record's nonce when set.
//
// A v2 entry whose checksum does not verify decodes to ErrCorrupt, not ErrMalformed:
// its bytes changed after they were encoded (on this replica's disk, most likely),
// and the apply must not treat it as the proposer's mistake (see ErrCorrupt).

// Codec versions: the first byte of every encoded entry and result.
const (
	CodecVersion   byte = 4 // what Encode writes
	CodecVersionV3 byte = 3 // entries: decoded from logs, never written for new ones
	CodecVersionV2 byte = 2 // what EncodeResult writes; entries: decoded from logs, never written for new ones
	CodecVersionV1 byte = 1 // decoded for entries already in logs; never written for new ones
)

// Entry kinds (the second byte).
const (
	kindIntents  byte = 1
	kindClaim    byte = 2
	kindRenew    byte = 3
	kindRelease  byte = 4
	kindTransfer byte = 5
	kindCommit   byte = 6
	kindGenesis  byte = 7    // version 2 only
	kindResult   byte = 0x80 // a Result, not an Entry
)

// crcSize is the length of the v2 trailer.
const crcSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32c returns the CRC-32C of b.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// seal appends the CRC-32C of w.b to w.b (the v2 trailer).
func (w *wbuf) seal() { w.b = binary.BigEndian.AppendUint32(w.b, crc32c(w.b)) }

// Encode returns the versioned bytes of e: version 2, except for an entry that Decode
// read from version-1 bytes, which encodes back to those bytes. It fails only for a
// nil or unknown Entry.
func Encode(e Entry) ([]byte, error) {
	if isV1(e) {
		return encodeV1(e)
	}
	size := 64
	switch e := e.(type) {
	case IntentsEntry:
		for _, in := range e.Intents {
			size += intentSize(in)
		}
	case CommitEntry:
		size += len(e.Raw)
	}
	w := &wbuf{b: make([]byte, 0, size)}
	w.byte1(versionOf(e))
	switch e := e.(type) {
	case IntentsEntry:
		w.byte1(kindIntents)
		encodeIntents(w, e.Intents)
	case ClaimEntry:
		w.byte1(kindClaim)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.uvarint(e.PrevRev)
		w.varint(e.TS)
		w.varint(e.TTL)
		w.bool(e.Force)
		w.str(e.Reason)
		if e.Nonce != 0 {
			w.uvarint(e.Nonce)
		}
	case RenewEntry:
		w.byte1(kindRenew)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.uvarint(e.PrevRev)
		w.varint(e.TS)
	case ReleaseEntry:
		w.byte1(kindRelease)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.uvarint(e.PrevRev)
	case TransferEntry:
		w.byte1(kindTransfer)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.uvarint(e.PrevRev)
		w.str(e.To)
		w.varint(e.TS)
	case CommitEntry:
		w.byte1(kindCommit)
		w.bytes(e.Raw)
	case GenesisEntry:
		w.byte1(kindGenesis)
		w.str(e.Chain)
		w.uvarint(e.Version)
		w.bytes(e.Nonce)
		w.varint(e.TS)
		w.varint(e.Retention)
		w.uvarint(e.MaxIDs)
		if e.Repo != "" {
			w.str(e.Repo)
		}
	default:
		return nil, fmt.Errorf("encode entry: unknown entry type %T", e)
	}
	w.seal()
	return w.b, nil
}

// versionOf is the version e encodes as: the sealed version it was decoded from (so
// that its bytes, and the rule the apply keeps for it, do not change), else
// CodecVersion.
func versionOf(e Entry) byte {
	var v byte
	switch e := e.(type) {
	case IntentsEntry:
		v = e.ver
	case ClaimEntry:
		v = e.ver
	case RenewEntry:
		v = e.ver
	case ReleaseEntry:
		v = e.ver
	case TransferEntry:
		v = e.ver
	case CommitEntry:
		v = e.ver
	case GenesisEntry:
		v = e.ver
	}
	if v == 0 {
		return CodecVersion
	}
	return v
}

// markVersion marks an entry decoded from the sealed version v (2 or 3).
func markVersion(e Entry, v byte) Entry {
	switch x := e.(type) {
	case IntentsEntry:
		x.ver = v
		return x
	case ClaimEntry:
		x.ver = v
		return x
	case RenewEntry:
		x.ver = v
		return x
	case ReleaseEntry:
		x.ver = v
		return x
	case TransferEntry:
		x.ver = v
		return x
	case CommitEntry:
		x.ver = v
		return x
	case GenesisEntry:
		x.ver = v
		return x
	}
	return e
}

// isV1 reports whether e was decoded from version-1 bytes.
func isV1(e Entry) bool {
	switch e := e.(type) {
	case IntentsEntry:
		return e.v1
	case ClaimEntry:
		return e.v1
	case RenewEntry:
		return e.v1
	case ReleaseEntry:
		return e.v1
	case TransferEntry:
		return e.v1
	case CommitEntry:
		return e.v1
	}
	return false
}

// encodeV1 writes e in the version-1 layout (for entries decoded from it, and for
// tests that build the logs older versions wrote).
func encodeV1(e Entry) ([]byte, error) {
	w := &wbuf{}
	w.byte1(CodecVersionV1)
	switch e := e.(type) {
	case IntentsEntry:
		w.byte1(kindIntents)
		encodeIntents(w, e.Intents)
	case ClaimEntry:
		w.byte1(kindClaim)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.uvarint(e.prevEpoch)
		w.varint(e.TS)
		w.varint(e.TTL)
		w.bool(e.Force)
		w.str(e.Reason)
	case RenewEntry:
		w.byte1(kindRenew)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.varint(e.TS)
	case ReleaseEntry:
		w.byte1(kindRelease)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
	case TransferEntry:
		w.byte1(kindTransfer)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.str(e.To)
		w.varint(e.TS)
	case CommitEntry:
		w.byte1(kindCommit)
		w.bytes(e.Raw)
	default:
		return nil, fmt.Errorf("encode v1 entry: no v1 layout for %T", e)
	}
	return w.b, nil
}

// Decode parses bytes produced by Encode (version 3) or by an older version of it
// (versions 2 and 1). Errors wrap ErrMalformed, or ErrCorrupt for a sealed (version 2
// or 3) entry whose checksum does not verify.
func Decode(b []byte) (Entry, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrMalformed)
	}
	switch b[0] {
	case CodecVersion, CodecVersionV3, CodecVersionV2:
		body, err := checkSeal(b)
		if err != nil {
			return nil, err
		}
		e, err := decodeV2(body)
		if err == nil && b[0] != CodecVersion {
			e = markVersion(e, b[0])
		}
		return e, err
	case CodecVersionV1:
		e, err := decodeV1(b[1:])
		if err == nil {
			return e, nil
		}
		if v, ok := sealedAsAny(b); ok {
			// A sealed entry whose version byte changed: corruption, not a bad proposal.
			return nil, fmt.Errorf("%w: entry version byte %d, but its bytes verify as version %d", ErrCorrupt, b[0], v)
		}
		return e, err
	}
	if v, ok := sealedAsAny(b); ok {
		return nil, fmt.Errorf("%w: entry version byte %d, but its bytes verify as version %d", ErrCorrupt, b[0], v)
	}
	return nil, fmt.Errorf("%w: unknown version %d", ErrMalformed, b[0])
}

// checkSeal verifies the CRC-32C trailer of a version-2 encoding and returns what is
// between the version byte and the trailer.
func checkSeal(b []byte) ([]byte, error) {
	if len(b) < 2+crcSize {
		return nil, fmt.Errorf("%w: %d-byte entry is shorter than a version-%d header and checksum", ErrMalformed, len(b), b[0])
	}
	n := len(b) - crcSize
	if got, want := binary.BigEndian.Uint32(b[n:]), crc32c(b[:n]); got != want {
		return nil, fmt.Errorf("%w: entry checksum %08x, computed %08x", ErrCorrupt, got, want)
	}
	return b[1:n], nil
}

// sealedAs reports whether b, with its first byte replaced by version, carries a valid
// version-2 trailer: a changed version byte must not turn corruption into "malformed".
func sealedAs(b []byte, version byte) bool {
	if len(b) < 2+crcSize {
		return false
	}
	n := len(b) - crcSize
	c := crc32.Update(0, castagnoli, []byte{version})
	c = crc32.Update(c, castagnoli, b[1:n])
	return c == binary.BigEndian.Uint32(b[n:])
}

// sealedAsAny reports whether b verifies as a sealed entry of either sealed version.
func sealedAsAny(b []byte) (byte, bool) {
	for _, v := range []byte{CodecVersion, CodecVersionV3, CodecVersionV2} {
		if sealedAs(b, v) {
			return v, true
		}
	}
	return 0, false
}

func decodeV2(body []byte) (Entry, error) {
	r := &rbuf{b: body}
	var e Entry
	switch k := r.byte1(); k {
	case kindIntents:
		e = IntentsEntry{Intents: decodeIntents(r)}
	case kindClaim:
		c := ClaimEntry{Holder: r.str(), Epoch: r.uvarint(), PrevRev: r.uvarint(),
			TS: r.varint(), TTL: r.varint(), Force: r.bool(), Reason: r.str()}
		c.Nonce = r.optNonce()
		e = c
	case kindRenew:
		e = RenewEntry{Holder: r.str(), Epoch: r.uvarint(), PrevRev: r.uvarint(), TS: r.varint()}
	case kindRelease:
		e = ReleaseEntry{Holder: r.str(), Epoch: r.uvarint(), PrevRev: r.uvarint()}
	case kindTransfer:
		e = TransferEntry{Holder: r.str(), Epoch: r.uvarint(), PrevRev: r.uvarint(), To: r.str(), TS: r.varint()}
	case kindCommit:
		e = CommitEntry{Raw: r.bytes()}
	case kindGenesis:
		g := GenesisEntry{Chain: r.str(), Version: r.uvarint(), Nonce: r.bytes(), TS: r.varint(),
			Retention: r.varint(), MaxIDs: r.uvarint()}
		if r.err == nil && len(r.b) > 0 { // Repo, written only when set
			if g.Repo = r.str(); r.err == nil && g.Repo == "" {
				r.fail("genesis repo present but empty")
			}
		}
		e = g
	default:
		if r.err == nil {
			return nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, k)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return e, nil
}

func decodeV1(body []byte) (Entry, error) {
	r := &rbuf{b: body}
	var e Entry
	switch k := r.byte1(); k {
	case kindIntents:
		e = IntentsEntry{Intents: decodeIntents(r), v1: true}
	case kindClaim:
		e = ClaimEntry{Holder: r.str(), Epoch: r.uvarint(), prevEpoch: r.uvarint(),
			TS: r.varint(), TTL: r.varint(), Force: r.bool(), Reason: r.str(), v1: true}
	case kindRenew:
		e = RenewEntry{Holder: r.str(), Epoch: r.uvarint(), TS: r.varint(), v1: true}
	case kindRelease:
		e = ReleaseEntry{Holder: r.str(), Epoch: r.uvarint(), v1: true}
	case kindTransfer:
		e = TransferEntry{Holder: r.str(), Epoch: r.uvarint(), To: r.str(), TS: r.varint(), v1: true}
	case kindCommit:
		e = CommitEntry{Raw: r.bytes(), v1: true}
	default:
		if r.err == nil {
			return nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, k)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return e, nil
}

func encodeIntents(w *wbuf, ins []Intent) {
	w.uvarint(uint64(len(ins)))
	for _, in := range ins {
		encodeIntent(w, in)
	}
}

func decodeIntents(r *rbuf) []Intent {
	n := r.count(4) // op, id length, path length, value flag
	ins := make([]Intent, n)
	for i := range ins {
		ins[i] = decodeIntent(r)
	}
	return ins
}

func encodeIntent(w *wbuf, in Intent) {
	w.byte1(byte(in.Op))
	w.str(in.ID)
	w.str(in.Path)
	w.optBytes(in.Value)
}

// intentSize bounds the encoded size of an intent (for preallocation).
func intentSize(in Intent) int {
	return 1 + 3*binaryMaxVarintLen + len(in.ID) + len(in.Path) + len(in.Value) + 1
}

const binaryMaxVarintLen = 10

func decodeIntent(r *rbuf) Intent {
	return Intent{Op: Op(r.byte1()), ID: r.str(), Path: r.str(), Value: r.optBytes()}
}

// EncodeResult returns the versioned bytes of a Result (what a forwarding handler
// sends back to the follower that forwarded a proposal): version 2, sealed like an
// entry.
func EncodeResult(res Result) []byte {
	w := &wbuf{b: make([]byte, 0, 128)}
	w.byte1(CodecVersionV2) // results did not change with entry version 3
	w.byte1(kindResult)
	w.uvarint(res.Index)
	w.bool(res.Accepted)
	w.str(string(res.Reason))
	w.uvarint(uint64(len(res.Intents)))
	for _, ir := range res.Intents {
		encodeIntentResult(w, ir)
	}
	encodeLease(w, res.Lease)
	encodeHead(w, res.Head)
	if res.Lease.Nonce != 0 {
		w.uvarint(res.Lease.Nonce) // after the head, only when set (see ClaimEntry.Nonce)
	}
	w.seal()
	return w.b
}

// DecodeResult parses bytes produced by EncodeResult, or by its version 1 (a leader
// that runs an older build). Errors wrap ErrMalformed, or ErrCorrupt when the
// checksum fails.
func DecodeResult(b []byte) (Result, error) {
	if len(b) == 0 {
		return Result{}, fmt.Errorf("%w: empty result", ErrMalformed)
	}
	v1 := false
	switch b[0] {
	case CodecVersionV2:
		body, err := checkSeal(b)
		if err != nil {
			return Result{}, err
		}
		b = body
	case CodecVersionV1:
		v1, b = true, b[1:]
	default:
		return Result{}, fmt.Errorf("%w: unknown version %d", ErrMalformed, b[0])
	}
	r := &rbuf{b: b}
	if k := r.byte1(); r.err == nil && k != kindResult {
		return Result{}, fmt.Errorf("%w: not a result (kind %d)", ErrMalformed, k)
	}
	var res Result
	res.Index = r.uvarint()
	res.Accepted = r.bool()
	res.Reason = Reason(r.str())
	if n := r.count(6); n > 0 {
		res.Intents = make([]IntentResult, n)
		for i := range res.Intents {
			if v1 {
				res.Intents[i] = decodeIntentResultV1(r)
			} else {
				res.Intents[i] = decodeIntentResult(r)
			}
		}
	}
	if v1 {
		res.Lease = decodeLeaseV1(r)
	} else {
		res.Lease = decodeLease(r)
	}
	res.Head = decodeHead(r)
	if !v1 {
		res.Lease.Nonce = r.optNonce()
	}
	if err := r.done(); err != nil {
		return Result{}, err
	}
	return res, nil
}

func encodeIntentResult(w *wbuf, ir IntentResult) {
	w.str(ir.ID)
	w.bool(ir.Accepted)
	w.str(string(ir.Reason))
	w.uvarint(ir.Index)
	w.bool(ir.Duplicate)
	w.uvarint(ir.Seq)
	if ir.Hash == ([32]byte{}) {
		w.byte1(0)
	} else {
		w.byte1(1)
		w.b = append(w.b, ir.Hash[:]...)
	}
	w.varint(ir.LogTime)
}

func decodeIntentResult(r *rbuf) IntentResult {
	ir := IntentResult{ID: r.str(), Accepted: r.bool(), Reason: Reason(r.str()),
		Index: r.uvarint(), Duplicate: r.bool(), Seq: r.uvarint()}
	switch r.byte1() {
	case 0:
	case 1:
		ir.Hash = r.hash32()
		if r.err == nil && ir.Hash == ([32]byte{}) {
			r.fail("zero hash marked present") // Encode writes it absent
		}
	default:
		r.fail("bad presence flag")
	}
	ir.LogTime = r.varint()
	return ir
}

func decodeIntentResultV1(r *rbuf) IntentResult {
	return IntentResult{ID: r.str(), Accepted: r.bool(), Reason: Reason(r.str()),
		Index: r.uvarint(), Duplicate: r.bool(), Seq: r.uvarint()}
}

// encodeLease writes the record without its Nonce, which a record's stored form and a
// Result carry at their ends, only when set (so that a record without one keeps the
// bytes of the builds before it).
func encodeLease(w *wbuf, l Lease) {
	w.str(l.Holder)
	w.uvarint(l.Epoch)
	w.varint(l.TS)
	w.varint(l.TTL)
	w.uvarint(l.Rev)
}

func decodeLease(r *rbuf) Lease {
	return Lease{Holder: r.str(), Epoch: r.uvarint(), TS: r.varint(), TTL: r.varint(), Rev: r.uvarint()}
}

// decodeLeaseV1 reads a lease written before revisions (Rev stays 0).
func decodeLeaseV1(r *rbuf) Lease {
	return Lease{Holder: r.str(), Epoch: r.uvarint(), TS: r.varint(), TTL: r.varint()}
}

func encodeHead(w *wbuf, h Head) {
	w.uvarint(h.Seq)
	w.b = append(w.b, h.Hash[:]...)
	w.uvarint(h.Epoch)
	w.str(h.Signer)
}

func decodeHead(r *rbuf) Head {
	var h Head
	h.Seq = r.uvarint()
	h.Hash = r.hash32()
	h.Epoch = r.uvarint()
	h.Signer = r.str()
	return h
}

func encodeLeaseEvent(w *wbuf, ev LeaseEvent) {
	w.uvarint(ev.Index)
	w.str(ev.Event)
	w.str(ev.Holder)
	w.uvarint(ev.Epoch)
	w.varint(ev.TS)
	w.str(ev.Prior)
	w.str(ev.Reason)
}

func decodeLeaseEvent(r *rbuf) LeaseEvent {
	return LeaseEvent{Index: r.uvarint(), Event: r.str(), Holder: r.str(), Epoch: r.uvarint(),
		TS: r.varint(), Prior: r.str(), Reason: r.str()}
}
