package chain

import (
	"fmt"
	"sync"
)

// Commit formats. A chain's format is fixed by its genesis (the genesis entry's
// commit format version, intentlog.GenesisEntry.Version); a genesis written before
// formats existed declares FormatBaton, so existing data dirs replay unchanged.
const (
	// FormatBaton is baton's own format (this package: Commit, Sign, Verify), version 1.
	FormatBaton uint64 = Version
	// FormatAtproto is an atproto repository: commit v3 signed with the DID's #atproto
	// key (P-256) inside a baton envelope that carries the fence (package
	// signer/chain/atproto).
	FormatAtproto uint64 = 3
)

// Format is a commit format: how a commit's signed bytes are encoded, hashed, signed
// and verified, and which chain keys it takes. The fence (seq, epoch, signer, prev)
// is what every format's Verify returns as a Commit, so the apply checks it the same
// way whatever the format; what the format signs beyond it is its own business.
//
// Implementations are deterministic in Verify and Hash (the apply calls them) and
// safe for concurrent use.
type Format interface {
	// ID is the format's number as a genesis declares it.
	ID() uint64
	// Name is a short name for people and flags: "baton", "atproto".
	Name() string
	// KeyType is the chain key type the format signs with: "ed25519", "p256".
	KeyType() string
	// Sign signs c with key and returns the full encoding a CommitEntry carries. A
	// stateful format (atproto: the repository's tree) is bound to its state when it
	// is built; Sign does not change that state (the apply does).
	Sign(key Key, c Commit) ([]byte, error)
	// VerifySelf decodes raw strictly and verifies its signature under the key its own
	// chain field names; it returns the fence and the ops. Errors are *VerifyError.
	VerifySelf(raw []byte) (Commit, error)
	// Hash is the link hash of a full encoding: the next commit's prev.
	Hash(raw []byte) [HashSize]byte
}

// Baton is today's format (version 1): the encoding, signature and hash of this package.
var Baton Format = batonFormat{}

var _ ChainFormat = batonFormat{}

type batonFormat struct{}

func (batonFormat) ID() uint64                             { return FormatBaton }
func (batonFormat) Name() string                           { return "baton" }
func (batonFormat) KeyType() string                        { return "ed25519" }
func (batonFormat) Sign(key Key, c Commit) ([]byte, error) { return Sign(key, c) }
func (batonFormat) VerifySelf(raw []byte) (Commit, error)  { return VerifySelf(raw) }
func (batonFormat) Hash(raw []byte) [HashSize]byte         { return Hash(raw) }

var (
	formatsMu sync.RWMutex
	formats   = map[uint64]Format{FormatBaton: Baton}
)

// RegisterFormat makes f known to FormatOf (a format package calls it from init).
// Registering a second format under one ID panics: a genesis names exactly one.
func RegisterFormat(f Format) {
	formatsMu.Lock()
	defer formatsMu.Unlock()
	if old, ok := formats[f.ID()]; ok && old != f {
		panic(fmt.Sprintf("chain: format %d registered twice (%s, %s)", f.ID(), old.Name(), f.Name()))
	}
	formats[f.ID()] = f
}

// FormatOf returns the format a genesis's commit format version names.
func FormatOf(id uint64) (Format, error) {
	formatsMu.RLock()
	defer formatsMu.RUnlock()
	if f, ok := formats[id]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("%w: commit format %d", ErrUnknownFormat, id)
}

// FormatNamed returns the format called name ("baton", "atproto").
func FormatNamed(name string) (Format, error) {
	formatsMu.RLock()
	defer formatsMu.RUnlock()
	for _, f := range formats {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownFormat, name)
}

// Stepper checks one chain's commits in order, seq 1 first: each commit verifies and
// links to the one before (ChainVerifier for baton's format; a stateful format also
// replays its state). After the first error every later call returns it again.
type Stepper interface {
	Next(raw []byte) (Commit, error)
	Head() Head
}

// ChainFormat is a Format that checks whole chains (every registered format is one):
// NewStepper returns a Stepper for the chain whose key is the did:key did, from seq 1.
// It is a separate interface so that a Format that only signs and verifies single
// commits stays one.
type ChainFormat interface {
	Format
	NewStepper(did string) (Stepper, error)
}

// NewStepper returns f's chain checker for did (ErrUnknownFormat if f checks no
// chains).
func NewStepper(f Format, did string) (Stepper, error) {
	cf, ok := f.(ChainFormat)
	if !ok {
		return nil, fmt.Errorf("%w: format %s checks no chains", ErrUnknownFormat, f.Name())
	}
	return cf.NewStepper(did)
}

// VerifyChainOf checks a whole chain in f's format from seq 1 (VerifyChain for
// baton's) and returns the first problem, with its seq and index when it is a
// *VerifyError.
func VerifyChainOf(f Format, raws [][]byte, did string) error {
	s, err := NewStepper(f, did)
	if err != nil {
		return err
	}
	for i, raw := range raws {
		if _, err := s.Next(raw); err != nil {
			if ve, ok := err.(*VerifyError); ok && ve.Index == 0 {
				ve.Index = i
			}
			return err
		}
	}
	return nil
}

// VerifyOf verifies one commit in f's format (VerifySelf) and checks that it is a
// commit of the chain did (Verify for baton's). Errors are *VerifyError.
func VerifyOf(f Format, raw []byte, did string) (Commit, error) {
	c, err := f.VerifySelf(raw)
	if err != nil {
		return c, err
	}
	if c.Chain != did {
		return c, &VerifyError{Reason: ReasonWrongChain, Seq: c.Seq, Detail: fmt.Sprintf("chain %q, want %q", abbrev(c.Chain), did)}
	}
	return c, nil
}

// NewStepper is NewChainVerifier from seq 1.
func (batonFormat) NewStepper(did string) (Stepper, error) { return NewChainVerifier(did, Head{}) }
