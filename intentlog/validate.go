package intentlog

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits the apply enforces. They are part of the replicated state machine: changing
// one changes which entries are accepted, so every replica must run the same values.
const (
	MaxIDLen     = 256     // bytes in an intent ID
	MaxPathLen   = 512     // bytes in a record path
	MaxValueLen  = 1 << 20 // bytes in a record value
	MaxHolderLen = 256     // bytes in a lease holder or transfer target
	MaxReasonLen = 1024    // bytes in a steal reason
	MaxChainLen  = 256     // bytes in a genesis chain DID
	// GenesisNonceLen is the length of a genesis nonce.
	GenesisNonceLen = 16
	// CommitFormatVersion is the commit format version a genesis declares: the only
	// one this apply knows (package signer's format, version 1).
	CommitFormatVersion = 1
	// MaxEntryBytes bounds one encoded entry accepted by Propose and ApplyEncoded.
	MaxEntryBytes = 16 << 20
	// MaxPending is the most intents that may wait to be signed: an intent arriving at
	// a full queue is refused with ReasonBacklog (retry once the chain moves).
	MaxPending = 65536
	// DefaultRetention is how long (ms of log time) the dedupe window remembers an
	// accepted intent ID at least, when the genesis does not say (Genesis.Retention).
	DefaultRetention = 24 * 60 * 60 * 1000
	// StepsPerRetention: one entry moves log time by at most max(retention /
	// StepsPerRetention, the lease's TTL, 1 s) (applier.maxLogTimeStep), so that a
	// clock error costs at most a sixteenth of an ID's retention; CheckLeaseTTL keeps
	// the TTL from being the larger term.
	StepsPerRetention = 16
	// evictPerEntry bounds the dedupe IDs one entry may forget, so that a big jump in
	// log time never turns one entry into a huge transaction.
	evictPerEntry = 4096
	// legacyDedupeWindow is version 1's count window: version-1 intents entries keep
	// its rule on replay (the last 65536 IDs, at most 65536 pending).
	legacyDedupeWindow = 65536
	// LeaseHistoryLen is how many lease events are kept (oldest evicted first).
	LeaseHistoryLen = 1024
)

// IntentError says why an intent is invalid: Reason is the code the apply counts
// (ReasonBadIntent, ReasonBadPath or ReasonTooLarge) and Msg a sentence for people.
type IntentError struct {
	Reason Reason
	Msg    string
}

func (e *IntentError) Error() string { return e.Msg }

func intentErr(r Reason, format string, args ...any) *IntentError {
	return &IntentError{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// ValidateIntent checks one intent on its own, as the apply does: it returns nil or an
// *IntentError. The API and the node call it too, so that a request is refused with
// the same rule, reason and message the apply would use.
func ValidateIntent(in Intent) error {
	if e := validateIntent(in); e != nil {
		return e
	}
	return nil
}

// validateIntent is ValidateIntent with a typed result (nil when valid).
func validateIntent(in Intent) *IntentError {
	if in.Op != OpPut && in.Op != OpDel {
		return intentErr(ReasonBadIntent, "unknown op %d (want put or del)", uint8(in.Op))
	}
	if e := validateID(in.ID); e != nil {
		return e
	}
	if len(in.Path) > MaxPathLen {
		return intentErr(ReasonTooLarge, "path longer than %d bytes", MaxPathLen)
	}
	if !ValidPath(in.Path) {
		return intentErr(ReasonBadPath, "path %q is not collection/rkey (printable ASCII, no spaces, no . or .. segments)", in.Path)
	}
	if len(in.Value) > MaxValueLen {
		return intentErr(ReasonTooLarge, "value longer than %d bytes", MaxValueLen)
	}
	if in.Op == OpDel && len(in.Value) > 0 {
		return intentErr(ReasonBadIntent, "value on a del (a del carries no value)")
	}
	return nil
}

func validateID(id string) *IntentError {
	switch {
	case id == "":
		return intentErr(ReasonBadIntent, "id is empty")
	case !utf8.ValidString(id): // before the length: the order of the checks is part of the apply
		return intentErr(ReasonBadIntent, "id is not valid UTF-8")
	case len(id) > MaxIDLen:
		return intentErr(ReasonTooLarge, "id longer than %d bytes", MaxIDLen)
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return intentErr(ReasonBadIntent, "id contains control character %U at byte %d", r, i)
		}
	}
	return nil
}

// ValidPath reports whether p is a record path: printable ASCII without spaces, at most
// MaxPathLen bytes, made of at least two non-empty segments separated by '/'
// ("collection/rkey"), none of them "." or "..". Keys without '/' are reserved for the
// state machine.
func ValidPath(p string) bool {
	if len(p) < 3 || len(p) > MaxPathLen || !strings.Contains(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e {
			return false
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// validateIntentV1 is the intent rule of version-1 entries (before ValidateIntent
// refused control characters in IDs and . or .. path segments): "" or the reason.
func validateIntentV1(in Intent) Reason {
	switch {
	case in.Op != OpPut && in.Op != OpDel:
		return ReasonBadIntent
	case in.ID == "" || !utf8.ValidString(in.ID):
		return ReasonBadIntent
	case len(in.ID) > MaxIDLen:
		return ReasonTooLarge
	case len(in.Path) > MaxPathLen:
		return ReasonTooLarge
	case !validPathV1(in.Path):
		return ReasonBadPath
	case len(in.Value) > MaxValueLen:
		return ReasonTooLarge
	case in.Op == OpDel && len(in.Value) > 0:
		return ReasonBadIntent
	}
	return ""
}

func validPathV1(p string) bool {
	if len(p) < 3 || len(p) > MaxPathLen || !strings.Contains(p, "/") {
		return false
	}
	if p[0] == '/' || p[len(p)-1] == '/' || strings.Contains(p, "//") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e {
			return false
		}
	}
	return true
}

// validChain checks a genesis chain DID.
func validChain(c string) Reason {
	switch {
	case c == "" || !utf8.ValidString(c):
		return ReasonBadEntry
	case len(c) > MaxChainLen:
		return ReasonTooLarge
	}
	for _, r := range c {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return ReasonBadEntry
		}
	}
	return ""
}

// validHolder checks a lease holder or transfer target.
func validHolder(h string) Reason {
	switch {
	case h == "" || !utf8.ValidString(h):
		return ReasonBadEntry
	case len(h) > MaxHolderLen:
		return ReasonTooLarge
	}
	return ""
}

// ErrTTLOverRetention: a lease TTL too long for the dedupe retention (CheckLeaseTTL).
var ErrTTLOverRetention = errors.New("intentlog: lease TTL too long for the dedupe retention")

// CheckLeaseTTL refuses a lease TTL over 1/StepsPerRetention of the dedupe retention
// (0: DefaultRetention): one entry moves log time by at most max(retention/16, TTL,
// 1 s), so with a longer TTL one step of a wall clock moves log time by a whole TTL,
// and a TTL near the retention lets one step clear the window of IDs it promised to
// remember (an acknowledged ID could then apply twice). At most a sixteenth, a step
// stays what the retention alone makes it. Devices check their own TTL against the
// retention of the genesis they write or find (the apply does not: a claim's TTL is
// the claimant's, and the entries already in logs keep their rule).
func CheckLeaseTTL(ttl, retention time.Duration) error {
	if retention <= 0 {
		retention = DefaultRetention * time.Millisecond
	}
	if limit := retention / StepsPerRetention; ttl > limit {
		need := ttl * StepsPerRetention
		if ttl > math.MaxInt64/StepsPerRetention {
			need = math.MaxInt64
		}
		return fmt.Errorf("%w: the lease TTL %s is more than 1/%d of the dedupe retention %s: one step of a wall clock "+
			"would move log time by a whole TTL, and the window could forget IDs it must remember; use a TTL of at most %s "+
			"(--ttl), or a chain whose genesis retention is at least %s",
			ErrTTLOverRetention, ttl, StepsPerRetention, retention, limit, need)
	}
	return nil
}
