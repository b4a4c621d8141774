package chain

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrInvalidDID reports a string that is not a well-formed did:key.
	ErrInvalidDID = errors.New("chain: invalid did:key")
	// ErrUnsupportedKeyType reports a did:key whose multicodec is known (P-256,
	// secp256k1) but not supported yet, or unknown altogether.
	ErrUnsupportedKeyType = errors.New("chain: unsupported key type")
	// ErrKeyFile reports a chain key file that is corrupt, of the wrong size or
	// format, or unsafe (readable by others).
	ErrKeyFile = errors.New("chain: bad chain key file")
	// ErrKeyExists is returned by SaveKey when the destination already exists: a chain
	// key is an identity and is never overwritten.
	ErrKeyExists = errors.New("chain: chain key file already exists")
	// ErrInvalidCommit reports a Commit that Sign refuses to sign (bad seq/prev
	// pairing, bad op, chain key mismatch).
	ErrInvalidCommit = errors.New("chain: invalid commit")
	// ErrSignature reports a signature produced by a Key that does not verify under
	// the key's own DID (a broken or substituted signing backend).
	ErrSignature = errors.New("chain: signature does not verify under the key's did")
	// ErrUnknownFormat reports a commit format (a genesis's version) this build does
	// not know.
	ErrUnknownFormat = errors.New("chain: unknown commit format")
)

// VerifyReason is a stable, machine-readable code for why a commit or a chain was
// refused.
type VerifyReason string

const (
	ReasonMalformed      VerifyReason = "malformed"       // not a CBOR map, or bytes left over
	ReasonNonCanonical   VerifyReason = "non_canonical"   // does not re-encode to the same bytes
	ReasonMissingKey     VerifyReason = "missing_key"     // a required map key is absent
	ReasonUnknownKey     VerifyReason = "unknown_key"     // a map key the format does not define
	ReasonBadType        VerifyReason = "bad_type"        // a value of the wrong CBOR type
	ReasonBadVersion     VerifyReason = "bad_version"     // v is not 1
	ReasonBadOp          VerifyReason = "bad_op"          // op not put/del, val on del, no val on put, empty id/path
	ReasonWrongChain     VerifyReason = "wrong_chain"     // chain is not the expected did:key
	ReasonBadChainKey    VerifyReason = "bad_chain_key"   // the chain did:key does not parse or is unsupported
	ReasonBadSignature   VerifyReason = "bad_signature"   // sig does not verify under the chain key
	ReasonBadSeq         VerifyReason = "bad_seq"         // seq is 0, or not previous seq + 1
	ReasonBadPrev        VerifyReason = "bad_prev"        // prev null off seq 1, set at seq 1, wrong length, or not the previous hash
	ReasonEpochDecreased VerifyReason = "epoch_decreased" // epoch lower than the previous commit's
)

// VerifyError is the error Decode, Verify and VerifyChain return for a refused commit.
// Seq is the commit's seq when it was readable (0 otherwise); Index is its position in
// the slice given to VerifyChain (0 elsewhere).
type VerifyError struct {
	Reason VerifyReason
	Seq    uint64
	Index  int
	Detail string
	Err    error // underlying cause, if any
}

func (e *VerifyError) Error() string {
	msg := "commit"
	if e.Seq != 0 {
		msg = fmt.Sprintf("commit seq %d", e.Seq)
	}
	msg += ": " + string(e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *VerifyError) Unwrap() error { return e.Err }

// ReasonOf returns the VerifyReason of err if it wraps a *VerifyError, else "".
func ReasonOf(err error) VerifyReason {
	var ve *VerifyError
	if errors.As(err, &ve) {
		return ve.Reason
	}
	return ""
}

func verr(reason VerifyReason, format string, args ...any) *VerifyError {
	return &VerifyError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
