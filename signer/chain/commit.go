package chain

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/fxamacker/cbor/v2"
)

// Version is the commit format version written in key `v`.
const Version = 1

// HashSize is the size of a commit hash (SHA-256).
const HashSize = sha256.Size

// Commit is one link of the chain. Its encoding (see DESIGN.md, "The chain") is a CBOR
// map in RFC 8949 core deterministic encoding with exactly the keys v, chain, seq,
// epoch, signer, prev, ops, time and sig.
type Commit struct {
	Version uint64 // v: format version, 1
	Chain   string // chain: the chain key's did:key
	Seq     uint64 // seq: 1 for the first commit, then +1
	Epoch   uint64 // epoch: lease epoch it was signed under
	Signer  string // signer: the holder's libp2p peer ID
	Prev    []byte // prev: SHA-256 of the previous commit's encoding; nil at seq 1
	Ops     []Op   // ops: in log order; Value is nil for Del, non-nil for Put after Decode
	Time    int64  // time: holder's wall clock, unix ms
	Sig     []byte // sig: signature over the encoding without sig
}

// wireOp and wireCommit are the CBOR shapes. Field order does not matter: the core
// deterministic mode sorts map keys (shorter first, then bytewise).
type wireOp struct {
	ID   string `cbor:"id"`
	Op   string `cbor:"op"`
	Path string `cbor:"path"`
	Val  []byte `cbor:"val,omitzero"` // nil (del) = absent; put always carries a non-nil slice
}

type wireCommit struct {
	V      uint64   `cbor:"v"`
	Chain  string   `cbor:"chain"`
	Seq    uint64   `cbor:"seq"`
	Epoch  uint64   `cbor:"epoch"`
	Signer string   `cbor:"signer"`
	Prev   []byte   `cbor:"prev"` // nil encodes as CBOR null
	Ops    []wireOp `cbor:"ops"`  // never nil: an empty array, not null
	Time   int64    `cbor:"time"`
	Sig    []byte   `cbor:"sig,omitzero"` // absent in the signed bytes
}

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	encMode, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic("chain: cbor enc mode: " + err.Error())
	}
	// Decoding is lenient about canonical form on purpose (indefinite lengths,
	// non-minimal heads are read) so that Decode can name the problem
	// (non_canonical) by re-encoding; tags and duplicate keys are refused outright.
	decMode, err = cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		TagsMd:           cbor.TagsForbidden,
		MaxNestedLevels:  8,
		MaxArrayElements: 1 << 20,
		MaxMapPairs:      1 << 20,
	}.DecMode()
	if err != nil {
		panic("chain: cbor dec mode: " + err.Error())
	}
}

func toWire(c *Commit, withSig bool) (wireCommit, error) {
	w := wireCommit{
		V:      c.Version,
		Chain:  c.Chain,
		Seq:    c.Seq,
		Epoch:  c.Epoch,
		Signer: c.Signer,
		Prev:   c.Prev,
		Ops:    make([]wireOp, len(c.Ops)),
		Time:   c.Time,
	}
	if withSig {
		w.Sig = c.Sig
	}
	for i, in := range c.Ops {
		if in.ID == "" || in.Path == "" {
			return w, fmt.Errorf("%w: op %d: empty id or path", ErrInvalidCommit, i)
		}
		o := wireOp{ID: in.ID, Path: in.Path}
		switch in.Kind {
		case Put:
			o.Op = "put"
			o.Val = in.Value
			if o.Val == nil {
				o.Val = []byte{}
			}
		case Del:
			o.Op = "del"
			if len(in.Value) != 0 {
				return w, fmt.Errorf("%w: op %d (%s): del with a value", ErrInvalidCommit, i, in.ID)
			}
		default:
			return w, fmt.Errorf("%w: op %d (%s): unknown op %d", ErrInvalidCommit, i, in.ID, in.Kind)
		}
		w.Ops[i] = o
	}
	return w, nil
}

// Encode returns the canonical encoding of c as it stands, sig included if set. It
// does not sign or verify; use Sign to produce a commit. Exported for tools and tests.
func Encode(c Commit) ([]byte, error) {
	w, err := toWire(&c, true)
	if err != nil {
		return nil, err
	}
	return encMode.Marshal(w)
}

// SigningBytes returns the bytes the signature covers: the encoding without sig.
func SigningBytes(c Commit) ([]byte, error) {
	w, err := toWire(&c, false)
	if err != nil {
		return nil, err
	}
	return encMode.Marshal(w)
}

// Hash returns the commit hash: SHA-256 of the full encoding, sig included.
func Hash(raw []byte) [HashSize]byte { return sha256.Sum256(raw) }

// Sign fills in c.Chain (from key, if empty) and c.Version (1, if zero), checks the
// commit's shape, signs it with key and returns its full encoding. The signature is
// checked against key.DID() before returning, so a broken signing backend yields
// ErrSignature rather than a commit every replica would refuse.
func Sign(key Key, c Commit) (raw []byte, err error) {
	did := key.DID()
	if c.Chain == "" {
		c.Chain = did
	} else if c.Chain != did {
		return nil, fmt.Errorf("%w: chain %q but the key is %q", ErrInvalidCommit, abbrev(c.Chain), did)
	}
	if c.Version == 0 {
		c.Version = Version
	}
	if err := checkShape(&c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCommit, err)
	}
	if c.Signer == "" {
		return nil, fmt.Errorf("%w: empty signer", ErrInvalidCommit)
	}
	pub, err := ParseDID(did)
	if err != nil {
		return nil, fmt.Errorf("sign commit: %w", err)
	}
	msg, err := SigningBytes(c)
	if err != nil {
		return nil, err
	}
	sig, err := key.Sign(msg)
	if err != nil {
		return nil, fmt.Errorf("sign commit seq %d: %w", c.Seq, err)
	}
	if len(sig) == 0 || !pub.Verify(msg, sig) {
		return nil, fmt.Errorf("sign commit seq %d: %w", c.Seq, ErrSignature)
	}
	c.Sig = sig
	return Encode(c)
}

// checkShape checks the rules that do not need the previous commit: version, seq and
// prev pairing. It returns a *VerifyError.
func checkShape(c *Commit) *VerifyError {
	if c.Version != Version {
		return &VerifyError{Reason: ReasonBadVersion, Seq: c.Seq, Detail: fmt.Sprintf("v=%d, want %d", c.Version, Version)}
	}
	if c.Seq == 0 {
		return &VerifyError{Reason: ReasonBadSeq, Detail: "seq 0 (the first commit has seq 1)"}
	}
	if c.Seq == 1 && c.Prev != nil {
		return &VerifyError{Reason: ReasonBadPrev, Seq: c.Seq, Detail: "prev must be null at seq 1"}
	}
	if c.Seq > 1 && len(c.Prev) != HashSize {
		return &VerifyError{Reason: ReasonBadPrev, Seq: c.Seq, Detail: fmt.Sprintf("prev of %d bytes, want %d", len(c.Prev), HashSize)}
	}
	return nil
}

// Decode parses a commit's full encoding strictly: a map with exactly the format's
// keys and types, version 1, seq/prev consistent, and bytes that re-encode
// identically. It does not check the signature (Verify does). Errors are
// *VerifyError.
func Decode(raw []byte) (Commit, error) {
	c, _, err := decode(raw)
	return c, err
}

// Major types of CBOR initial bytes.
const (
	majUint  = 0
	majNeg   = 1
	majBytes = 2
	majText  = 3
	majArray = 4
	majMap   = 5
	cborNull = 0xf6
)

func major(raw cbor.RawMessage) int {
	if len(raw) == 0 {
		return -1
	}
	return int(raw[0] >> 5)
}

var topKeys = [...]string{"v", "chain", "seq", "epoch", "signer", "prev", "ops", "time", "sig"}

// decode returns the commit and the bytes its signature covers.
func decode(raw []byte) (Commit, []byte, error) {
	var c Commit
	var m map[string]cbor.RawMessage
	if err := decMode.Unmarshal(raw, &m); err != nil {
		return c, nil, &VerifyError{Reason: ReasonMalformed, Detail: "not a CBOR map", Err: err}
	}
	if m == nil {
		return c, nil, verr(ReasonMalformed, "not a CBOR map")
	}
	for _, k := range topKeys {
		if _, ok := m[k]; !ok {
			return c, nil, verr(ReasonMissingKey, "key %q", k)
		}
	}
	if k, ok := firstUnknown(m, topKeys[:]); ok {
		return c, nil, verr(ReasonUnknownKey, "key %q", abbrev(k))
	}
	field := func(key string, dst any, majors ...int) *VerifyError {
		rm := m[key]
		ok := false
		for _, mt := range majors {
			ok = ok || major(rm) == mt
		}
		if !ok {
			return &VerifyError{Reason: ReasonBadType, Seq: c.Seq, Detail: fmt.Sprintf("key %q has CBOR major type %d", key, major(rm))}
		}
		if err := decMode.Unmarshal(rm, dst); err != nil {
			return &VerifyError{Reason: ReasonBadType, Seq: c.Seq, Detail: fmt.Sprintf("key %q", key), Err: err}
		}
		return nil
	}
	// seq first, so later errors carry it.
	if e := field("seq", &c.Seq, majUint); e != nil {
		return c, nil, e
	}
	if e := field("v", &c.Version, majUint); e != nil {
		return c, nil, e
	}
	if c.Version != Version {
		return c, nil, &VerifyError{Reason: ReasonBadVersion, Seq: c.Seq, Detail: fmt.Sprintf("v=%d, want %d", c.Version, Version)}
	}
	if e := field("chain", &c.Chain, majText); e != nil {
		return c, nil, e
	}
	if e := field("epoch", &c.Epoch, majUint); e != nil {
		return c, nil, e
	}
	if e := field("signer", &c.Signer, majText); e != nil {
		return c, nil, e
	}
	if pr := m["prev"]; len(pr) == 1 && pr[0] == cborNull {
		c.Prev = nil
	} else if e := field("prev", &c.Prev, majBytes); e != nil {
		return c, nil, e
	} else if c.Prev == nil {
		c.Prev = []byte{} // present but empty: reported as bad_prev by checkShape
	}
	if e := field("time", &c.Time, majUint, majNeg); e != nil {
		return c, nil, e
	}
	if e := field("sig", &c.Sig, majBytes); e != nil {
		return c, nil, e
	}
	var ops []map[string]cbor.RawMessage
	if e := field("ops", &ops, majArray); e != nil {
		return c, nil, e
	}
	c.Ops = make([]Op, len(ops))
	for i, om := range ops {
		in, e := decodeOp(i, om)
		if e != nil {
			e.Seq = c.Seq
			return c, nil, e
		}
		c.Ops[i] = in
	}
	if e := checkShape(&c); e != nil {
		return c, nil, e
	}
	if len(c.Sig) == 0 {
		return c, nil, &VerifyError{Reason: ReasonBadSignature, Seq: c.Seq, Detail: "empty sig"}
	}
	w, err := toWire(&c, true)
	if err != nil { // cannot happen after decodeOp; kept as a guard
		return c, nil, &VerifyError{Reason: ReasonBadOp, Seq: c.Seq, Err: err}
	}
	re, err := encMode.Marshal(w)
	if err != nil {
		return c, nil, &VerifyError{Reason: ReasonMalformed, Seq: c.Seq, Err: err}
	}
	if !bytes.Equal(re, raw) {
		return c, nil, &VerifyError{Reason: ReasonNonCanonical, Seq: c.Seq, Detail: "does not re-encode to the same bytes (RFC 8949 core deterministic encoding required)"}
	}
	w.Sig = nil
	unsigned, err := encMode.Marshal(w)
	if err != nil {
		return c, nil, &VerifyError{Reason: ReasonMalformed, Seq: c.Seq, Err: err}
	}
	return c, unsigned, nil
}

var opKeys = [...]string{"id", "op", "path", "val"}

// firstUnknown returns the smallest key of m not in allowed. Choosing the
// smallest keeps the error text deterministic (the apply calls the verifier).
func firstUnknown(m map[string]cbor.RawMessage, allowed []string) (string, bool) {
	first, found := "", false
	for k := range m {
		if !slices.Contains(allowed, k) && (!found || k < first) {
			first, found = k, true
		}
	}
	return first, found
}

func decodeOp(i int, om map[string]cbor.RawMessage) (Op, *VerifyError) {
	var in Op
	if om == nil {
		return in, verr(ReasonBadType, "op %d is not a map", i)
	}
	if k, ok := firstUnknown(om, opKeys[:]); ok {
		return in, verr(ReasonUnknownKey, "op %d: key %q", i, abbrev(k))
	}
	text := func(key string, dst *string) *VerifyError {
		rm, ok := om[key]
		if !ok {
			return verr(ReasonMissingKey, "op %d: key %q", i, key)
		}
		if major(rm) != majText {
			return verr(ReasonBadType, "op %d: key %q has CBOR major type %d", i, key, major(rm))
		}
		if err := decMode.Unmarshal(rm, dst); err != nil {
			return &VerifyError{Reason: ReasonBadType, Detail: fmt.Sprintf("op %d: key %q", i, key), Err: err}
		}
		return nil
	}
	var op string
	if e := text("id", &in.ID); e != nil {
		return in, e
	}
	if e := text("op", &op); e != nil {
		return in, e
	}
	if e := text("path", &in.Path); e != nil {
		return in, e
	}
	if in.ID == "" || in.Path == "" {
		return in, verr(ReasonBadOp, "op %d: empty id or path", i)
	}
	rv, hasVal := om["val"]
	switch op {
	case "put":
		in.Kind = Put
		if !hasVal {
			return in, verr(ReasonBadOp, "op %d (%s): put without val", i, abbrev(in.ID))
		}
		if major(rv) != majBytes {
			return in, verr(ReasonBadType, "op %d: key \"val\" has CBOR major type %d", i, major(rv))
		}
		if err := decMode.Unmarshal(rv, &in.Value); err != nil {
			return in, &VerifyError{Reason: ReasonBadType, Detail: fmt.Sprintf("op %d: key \"val\"", i), Err: err}
		}
		if in.Value == nil {
			in.Value = []byte{}
		}
	case "del":
		in.Kind = Del
		if hasVal {
			return in, verr(ReasonBadOp, "op %d (%s): del with val", i, abbrev(in.ID))
		}
	default:
		return in, verr(ReasonBadOp, "op %d: op %q, want \"put\" or \"del\"", i, abbrev(op))
	}
	return in, nil
}

// Kind is what an op does to a record: put or del.
type Kind uint8

const (
	Put Kind = 1
	Del Kind = 2
)

// String returns "put" or "del" (the format's spelling).
func (k Kind) String() string {
	switch k {
	case Put:
		return "put"
	case Del:
		return "del"
	}
	return "invalid"
}

// Op is one intent as the chain carries it: its client-chosen ID, what it does, the
// record path and, for a put, the value (nil for a del).
type Op struct {
	ID    string
	Kind  Kind
	Path  string
	Value []byte
}

// Head is the last commit of a chain as a verifier sees it. Seq 0 means an empty chain.
type Head struct {
	Seq    uint64
	Hash   [HashSize]byte
	Epoch  uint64
	Signer string
}
