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
