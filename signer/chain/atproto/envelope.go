package atproto

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/fxamacker/cbor/v2"

	"github.com/batonhq/baton/signer/chain"
)

// The envelope is what a CommitEntry carries on an atproto chain: the fence baton's
// apply checks (as for every format) around the signed atproto commit block. It is a
// CBOR map in core deterministic encoding:
//
//	{v: 3, chain: <did:key>, seq, epoch, signer, prev: <sha256 of the previous
//	 envelope> | null, time, prevData: <CID of the previous commit's data> | null,
//	 ops: [{id, op: "put"|"del", path, val?: <record DAG-CBOR>, prev?: <CID>}],
//	 commit: <signed commit block>}
//
// The link hash (the next envelope's prev, Head.Hash) is SHA-256 of the envelope.

type envOp struct {
	ID   string `cbor:"id"`
	Op   string `cbor:"op"`
	Path string `cbor:"path"`
	Val  []byte `cbor:"val,omitempty"`
	Prev []byte `cbor:"prev,omitempty"` // the record's CID before the op; absent for a create
}

type envWire struct {
	V        uint64  `cbor:"v"`
	Chain    string  `cbor:"chain"`
	Seq      uint64  `cbor:"seq"`
	Epoch    uint64  `cbor:"epoch"`
	Signer   string  `cbor:"signer"`
	Prev     []byte  `cbor:"prev"`
	Time     int64   `cbor:"time"`
	PrevData []byte  `cbor:"prevData"`
	Ops      []envOp `cbor:"ops"`
	Commit   []byte  `cbor:"commit"`
}

var envDecMode cbor.DecMode

func init() {
	var err error
	envDecMode, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxNestedLevels:   8,
		MaxArrayElements:  1 << 16,
		MaxMapPairs:       1 << 16,
	}.DecMode()
	if err != nil {
		panic("atproto: envelope dec mode: " + err.Error())
	}
}

// Envelope is a decoded envelope: the fence and ops as chain.Commit (Sig is the repo
// commit's), prevData, each op's prev CID, and the repo commit.
type Envelope struct {
	Commit   chain.Commit
	PrevData []byte   // nil at seq 1
	OpPrev   [][]byte // per op: the record's CID before it, nil for a create
	Repo     RepoCommit
	Block    []byte // the signed commit block
}

func verr(seq uint64, r chain.VerifyReason, format string, args ...any) *chain.VerifyError {
	return &chain.VerifyError{Reason: r, Seq: seq, Detail: fmt.Sprintf(format, args...)}
}

// DecodeEnvelope parses raw strictly and checks what needs no state: canonical bytes,
// seq/prev pairing, the commit block's shape, records and paths, one op per path. It
// does not check the signature (VerifyEnvelope does).
func DecodeEnvelope(raw []byte) (Envelope, error) {
	var e Envelope
	var w envWire
	if err := envDecMode.Unmarshal(raw, &w); err != nil {
		return e, &chain.VerifyError{Reason: chain.ReasonMalformed, Detail: "not an atproto envelope", Err: err}
	}
	seq := w.Seq
	re, err := encMode.Marshal(w)
	if err != nil || !bytes.Equal(re, raw) {
		return e, verr(seq, chain.ReasonNonCanonical, "envelope does not re-encode to the same bytes")
	}
	switch {
	case w.V != chain.FormatAtproto:
		return e, verr(seq, chain.ReasonBadVersion, "v=%d, want %d", w.V, chain.FormatAtproto)
	case seq == 0:
		return e, verr(seq, chain.ReasonBadSeq, "seq 0")
	case seq == 1 && (w.Prev != nil || w.PrevData != nil):
		return e, verr(seq, chain.ReasonBadPrev, "prev and prevData must be null at seq 1")
	case seq > 1 && len(w.Prev) != chain.HashSize:
		return e, verr(seq, chain.ReasonBadPrev, "prev of %d bytes", len(w.Prev))
	case seq > 1 && (len(w.PrevData) != CIDSize || !bytes.Equal(w.PrevData[:4], cidPrefix)):
		return e, verr(seq, chain.ReasonBadPrev, "prevData is not a CID")
	case w.Ops == nil:
		return e, verr(seq, chain.ReasonBadType, "ops is null")
	case w.Chain == "" || w.Signer == "":
		return e, verr(seq, chain.ReasonMissingKey, "empty chain or signer")
	}
	rc, err := DecodeRepoCommit(w.Commit)
	if err != nil {
		return e, &chain.VerifyError{Reason: chain.ReasonMalformed, Seq: seq, Detail: "commit block", Err: err}
	}
	e = Envelope{PrevData: w.PrevData, OpPrev: make([][]byte, len(w.Ops)), Repo: rc, Block: w.Commit,
		Commit: chain.Commit{Version: w.V, Chain: w.Chain, Seq: seq, Epoch: w.Epoch, Signer: w.Signer,
			Prev: w.Prev, Time: w.Time, Sig: rc.Sig, Ops: make([]chain.Op, len(w.Ops))}}
	for i, o := range w.Ops {
		op := chain.Op{ID: o.ID, Path: o.Path}
		if o.ID == "" {
			return e, verr(seq, chain.ReasonBadOp, "op %d: empty id", i)
		}
		if err := checkPath(o.Path); err != nil {
			return e, verr(seq, chain.ReasonBadOp, "op %d: %v", i, err)
		}
		if o.Prev != nil && (len(o.Prev) != CIDSize || !bytes.Equal(o.Prev[:4], cidPrefix)) {
			return e, verr(seq, chain.ReasonBadOp, "op %d: prev is not a CID", i)
		}
		switch o.Op {
		case "put":
			op.Kind, op.Value = chain.Put, o.Val
			if err := CheckRecord(o.Val); err != nil {
				return e, verr(seq, chain.ReasonBadOp, "op %d: %v", i, err)
			}
		case "del":
			op.Kind = chain.Del
			if o.Val != nil {
				return e, verr(seq, chain.ReasonBadOp, "op %d: a del has no val", i)
			}
		default:
			return e, verr(seq, chain.ReasonBadOp, "op %d: op %q", i, o.Op)
		}
		e.Commit.Ops[i], e.OpPrev[i] = op, o.Prev
	}
	return e, nil
}

// checkPath checks a record path: collection NSID / record key, a valid MST key.
func checkPath(p string) error {
	if _, _, err := syntax.ParseRepoPath(p); err != nil {
		return fmt.Errorf("path %q: %v", p, err)
	}
	if !mst.IsValidKey([]byte(p)) {
		return fmt.Errorf("path %q is not a valid MST key", p)
	}
	return nil
}

// VerifyEnvelope decodes raw (DecodeEnvelope) and verifies the repo commit's signature
// under the key the envelope's chain names.
func VerifyEnvelope(raw []byte) (Envelope, error) {
	e, err := DecodeEnvelope(raw)
	if err != nil {
		return e, err
	}
	if err := e.Repo.verifySig(e.Commit.Chain); err != nil {
		return e, &chain.VerifyError{Reason: chain.ReasonBadSignature, Seq: e.Commit.Seq, Err: err}
	}
	return e, nil
}

// encodeEnvelope writes the envelope of a fence, its ops and a signed commit block.
func encodeEnvelope(c chain.Commit, prevData []byte, opPrev [][]byte, block []byte) ([]byte, error) {
	w := envWire{V: chain.FormatAtproto, Chain: c.Chain, Seq: c.Seq, Epoch: c.Epoch, Signer: c.Signer,
		Prev: c.Prev, Time: c.Time, PrevData: prevData, Ops: make([]envOp, len(c.Ops)), Commit: block}
	for i, op := range c.Ops {
		o := envOp{ID: op.ID, Op: op.Kind.String(), Path: op.Path, Prev: opPrev[i]}
		if op.Kind == chain.Put {
			o.Val = op.Value
		}
		w.Ops[i] = o
	}
	return encMode.Marshal(w)
}

// Hash is the envelope's link hash.
func Hash(raw []byte) [chain.HashSize]byte { return sha256.Sum256(raw) }

// CheckOp checks one op on its own as the format requires: a valid record path, and
// for a put a DAG-CBOR record (for a del, no value).
func CheckOp(op chain.Op) error {
	if err := checkPath(op.Path); err != nil {
		return err
	}
	switch op.Kind {
	case chain.Put:
		return CheckRecord(op.Value)
	case chain.Del:
		if len(op.Value) != 0 {
			return fmt.Errorf("a del has no value")
		}
		return nil
	}
	return fmt.Errorf("unknown op %d", op.Kind)
}
