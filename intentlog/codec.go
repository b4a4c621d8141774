package intentlog

import "fmt"

// The entry encoding, version 1:
//
//	version byte (1) | kind byte | fields
//
// Integers are canonical (minimal) uvarints, signed integers zigzag varints, strings and
// byte strings a uvarint length then the bytes, booleans one byte 0 or 1, and optional
// byte strings a presence byte (0 absent, 1 present) then the byte string. Decode
// accepts exactly what Encode produces: it rejects trailing bytes, unknown versions and
// kinds, non-canonical integers and lengths beyond the input, and never allocates more
// than the input's size.

// CodecVersion is the first byte of every encoded entry and result.
const CodecVersion byte = 1

// Entry kinds (the second byte).
const (
	kindIntents  byte = 1
	kindClaim    byte = 2
	kindRenew    byte = 3
	kindRelease  byte = 4
	kindTransfer byte = 5
	kindCommit   byte = 6
	kindResult   byte = 0x80 // a Result, not an Entry
)

// Encode returns the versioned bytes of e. It fails only for a nil or unknown Entry.
func Encode(e Entry) ([]byte, error) {
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
	w.byte1(CodecVersion)
	switch e := e.(type) {
	case IntentsEntry:
		w.byte1(kindIntents)
		w.uvarint(uint64(len(e.Intents)))
		for _, in := range e.Intents {
			encodeIntent(w, in)
		}
	case ClaimEntry:
		w.byte1(kindClaim)
		w.str(e.Holder)
		w.uvarint(e.Epoch)
		w.uvarint(e.PrevEpoch)
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
		return nil, fmt.Errorf("encode entry: unknown entry type %T", e)
	}
	return w.b, nil
}

// Decode parses bytes produced by Encode. Errors wrap ErrMalformed.
func Decode(b []byte) (Entry, error) {
	r := &rbuf{b: b}
	if v := r.byte1(); r.err == nil && v != CodecVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrMalformed, v)
	}
	var e Entry
	switch k := r.byte1(); k {
	case kindIntents:
		n := r.count(4) // op, id length, path length, value flag
		ins := make([]Intent, n)
		for i := range ins {
			ins[i] = decodeIntent(r)
		}
		e = IntentsEntry{Intents: ins}
	case kindClaim:
		e = ClaimEntry{Holder: r.str(), Epoch: r.uvarint(), PrevEpoch: r.uvarint(),
			TS: r.varint(), TTL: r.varint(), Force: r.bool(), Reason: r.str()}
	case kindRenew:
		e = RenewEntry{Holder: r.str(), Epoch: r.uvarint(), TS: r.varint()}
	case kindRelease:
		e = ReleaseEntry{Holder: r.str(), Epoch: r.uvarint()}
	case kindTransfer:
		e = TransferEntry{Holder: r.str(), Epoch: r.uvarint(), To: r.str(), TS: r.varint()}
	case kindCommit:
		e = CommitEntry{Raw: r.bytes()}
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
// sends back to the follower that forwarded a proposal).
func EncodeResult(res Result) []byte {
	w := &wbuf{b: make([]byte, 0, 128)}
	w.byte1(CodecVersion)
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
	return w.b
}

// DecodeResult parses bytes produced by EncodeResult. Errors wrap ErrMalformed.
func DecodeResult(b []byte) (Result, error) {
	r := &rbuf{b: b}
	if v := r.byte1(); r.err == nil && v != CodecVersion {
		return Result{}, fmt.Errorf("%w: unknown version %d", ErrMalformed, v)
	}
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
			res.Intents[i] = decodeIntentResult(r)
		}
	}
	res.Lease = decodeLease(r)
	res.Head = decodeHead(r)
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
}

func decodeIntentResult(r *rbuf) IntentResult {
	return IntentResult{ID: r.str(), Accepted: r.bool(), Reason: Reason(r.str()),
		Index: r.uvarint(), Duplicate: r.bool(), Seq: r.uvarint()}
}

func encodeLease(w *wbuf, l Lease) {
	w.str(l.Holder)
	w.uvarint(l.Epoch)
	w.varint(l.TS)
	w.varint(l.TTL)
}

func decodeLease(r *rbuf) Lease {
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
	if r.err == nil {
		if len(r.b) < 32 {
			r.fail("short head hash")
		} else {
			copy(h.Hash[:], r.b[:32])
			r.b = r.b[32:]
		}
	}
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
