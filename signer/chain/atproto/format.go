package atproto

import (
	"fmt"

	"github.com/batonhq/baton/signer/chain"
)

// Format is the atproto commit format behind chain.Format. Verification and hashing
// need no state; signing needs the repository, so the registered value (Atproto)
// refuses to sign and Bind returns one that signs on top of a replica's repository.
type Format struct {
	state func() (Blocks, Head, string) // the repository, its head and DID
	rev   func(prev string) (string, error)
}

// Atproto is the registered format (chain.FormatOf(chain.FormatAtproto)).
var Atproto = &Format{}

func init() { chain.RegisterFormat(Atproto) }

var _ chain.ChainFormat = (*Format)(nil)

// Bind returns the format signing on top of the repository state returns, with revs
// from rev (NextRev with the proposer's bounded clock).
func (f *Format) Bind(state func() (Blocks, Head, string), rev func(prev string) (string, error)) *Format {
	return &Format{state: state, rev: rev}
}

func (*Format) ID() uint64      { return chain.FormatAtproto }
func (*Format) Name() string    { return "atproto" }
func (*Format) KeyType() string { return KeyType }

// Sign builds and signs the next commit (see Propose).
func (f *Format) Sign(key chain.Key, c chain.Commit) ([]byte, error) {
	if f.state == nil || f.rev == nil {
		return nil, fmt.Errorf("%w: the atproto format signs on top of a repository (Bind)", chain.ErrInvalidCommit)
	}
	bs, head, did := f.state()
	rev, err := f.rev(head.Rev)
	if err != nil {
		return nil, err
	}
	return Propose(key, bs, head, c, did, rev)
}

// VerifySelf decodes the envelope strictly and verifies its repo commit's signature.
func (*Format) VerifySelf(raw []byte) (chain.Commit, error) {
	e, err := VerifyEnvelope(raw)
	return e.Commit, err
}

// NewStepper checks a whole chain from seq 1, replaying its repository (ChainVerifier).
func (*Format) NewStepper(did string) (chain.Stepper, error) { return NewChainVerifier(did), nil }

// Hash is the envelope's link hash.
func (*Format) Hash(raw []byte) [chain.HashSize]byte { return Hash(raw) }
