package chain

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"sync/atomic"
)

// Verify decodes raw strictly (see Decode), checks that its chain is chain and that its
// signature verifies under that did:key. It does not check links to other commits
// (ChainVerifier and the apply do). Errors are *VerifyError.
func Verify(raw []byte, chain string) (Commit, error) {
	pub, err := ParseDID(chain)
	if err != nil {
		return Commit{}, &VerifyError{Reason: ReasonBadChainKey, Err: err}
	}
	return verifyWith(raw, chain, pub)
}

func verifyWith(raw []byte, chain string, pub PublicKey) (Commit, error) {
	c, unsigned, err := decode(raw)
	if err != nil {
		return c, err
	}
	return verifyDecoded(c, unsigned, chain, pub)
}

func verifyDecoded(c Commit, unsigned []byte, chain string, pub PublicKey) (Commit, error) {
	if c.Chain != chain {
		return c, &VerifyError{Reason: ReasonWrongChain, Seq: c.Seq, Detail: fmt.Sprintf("chain %q, want %q", abbrev(c.Chain), chain)}
	}
	if !pub.Verify(unsigned, c.Sig) {
		return c, &VerifyError{Reason: ReasonBadSignature, Seq: c.Seq, Detail: "signature does not verify under the chain key"}
	}
	return c, nil
}

// Verifier returns a function that verifies commits of chain (Verify with the did:key
// parsed once). If chain does not parse, every call fails with ReasonBadChainKey. It
// is deterministic: the same bytes give the same answer, error text included.
func Verifier(chain string) func(raw []byte) (Commit, error) {
	pub, perr := ParseDID(chain)
	return func(raw []byte) (Commit, error) {
		if perr != nil {
			return Commit{}, &VerifyError{Reason: ReasonBadChainKey, Err: perr}
		}
		return verifyWith(raw, chain, pub)
	}
}

// VerifySelf decodes raw strictly and verifies its signature under the key its own
// chain field names (whoever reads it then decides whether that is the right chain:
// the apply compares it with the genesis DID). Errors are *VerifyError.
func VerifySelf(raw []byte) (Commit, error) {
	c, unsigned, err := decode(raw)
	if err != nil {
		return c, err
	}
	pub, err := parseDIDCached(c.Chain)
	if err != nil {
		return c, &VerifyError{Reason: ReasonBadChainKey, Seq: c.Seq, Err: err}
	}
	return verifyDecoded(c, unsigned, c.Chain, pub)
}

// lastDID remembers the last did:key parsed (a process verifies one chain's commits,
// over and over): ParseDID is a multibase decode and a key check per commit.
var lastDID atomic.Pointer[parsedDID]

type parsedDID struct {
	did string
	pub PublicKey
}

func parseDIDCached(did string) (PublicKey, error) {
	if p := lastDID.Load(); p != nil && p.did == did {
		return p.pub, nil
	}
	pub, err := ParseDID(did)
	if err != nil {
		return nil, err
	}
	lastDID.Store(&parsedDID{did: did, pub: pub})
	return pub, nil
}

// ChainVerifier checks a chain one commit at a time, in order: each commit must
// verify, have seq = previous seq + 1, prev = previous hash (null at seq 1) and an
// epoch no lower than the previous one. It is not safe for concurrent use.
type ChainVerifier struct {
	chain string
	pub   PublicKey
	head  Head
	n     int
	err   error
}

// NewChainVerifier returns a verifier for chain starting after from: the zero Head
// for a whole chain (first commit seq 1), or a trusted head to check a suffix.
func NewChainVerifier(chain string, from Head) (*ChainVerifier, error) {
	pub, err := ParseDID(chain)
	if err != nil {
		return nil, &VerifyError{Reason: ReasonBadChainKey, Err: err}
	}
	return &ChainVerifier{chain: chain, pub: pub, head: from}, nil
}

// Next verifies the next commit. After the first error every later call returns it
// again. Errors are *VerifyError with Seq and Index (0-based count of commits given).
func (v *ChainVerifier) Next(raw []byte) (Commit, error) {
	if v.err != nil {
		return Commit{}, v.err
	}
	c, err := v.next(raw)
	if err != nil {
		if ve, ok := err.(*VerifyError); ok {
			ve.Index = v.n
		}
		v.err = err
		return c, err
	}
	v.n++
	return c, nil
}

func (v *ChainVerifier) next(raw []byte) (Commit, error) {
	c, err := verifyWith(raw, v.chain, v.pub)
	if err != nil {
		return c, err
	}
	if c.Seq != v.head.Seq+1 {
		return c, &VerifyError{Reason: ReasonBadSeq, Seq: c.Seq, Detail: fmt.Sprintf("seq %d after seq %d", c.Seq, v.head.Seq)}
	}
	if v.head.Seq > 0 && !bytes.Equal(c.Prev, v.head.Hash[:]) {
		return c, &VerifyError{Reason: ReasonBadPrev, Seq: c.Seq, Detail: fmt.Sprintf("prev %s, want hash of seq %d %s", hex.EncodeToString(c.Prev), v.head.Seq, hex.EncodeToString(v.head.Hash[:]))}
	}
	if c.Epoch < v.head.Epoch {
		return c, &VerifyError{Reason: ReasonEpochDecreased, Seq: c.Seq, Detail: fmt.Sprintf("epoch %d after epoch %d", c.Epoch, v.head.Epoch)}
	}
	v.head = Head{Seq: c.Seq, Hash: Hash(raw), Epoch: c.Epoch, Signer: c.Signer}
	return c, nil
}

// Head returns the last verified commit (the from head if none yet).
func (v *ChainVerifier) Head() Head { return v.head }

// VerifyChain checks a whole chain from seq 1 (see ChainVerifier) and returns the first
// problem as a *VerifyError carrying its seq and index, or nil.
func VerifyChain(raws [][]byte, chain string) error {
	v, err := NewChainVerifier(chain, Head{})
	if err != nil {
		return err
	}
	for _, raw := range raws {
		if _, err := v.Next(raw); err != nil {
			return err
		}
	}
	return nil
}
