package intentlog

import (
	"strings"
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
	// MaxEntryBytes bounds one encoded entry accepted by Propose and ApplyEncoded.
	MaxEntryBytes = 16 << 20
	// DedupeWindow is how many of the most recent accepted intent IDs are remembered.
	// It is also the most intents that may be pending at once: an intent arriving at a
	// full queue is rejected with ReasonBacklog, so that no unsigned ID ever leaves the
	// window (a retry of a pending intent is always recognised as a duplicate).
	DedupeWindow = 65536
	// LeaseHistoryLen is how many lease events are kept (oldest evicted first).
	LeaseHistoryLen = 1024
)

// validateIntent checks one intent on its own and returns "" or why it is rejected.
func validateIntent(in Intent) Reason {
	switch {
	case in.Op != OpPut && in.Op != OpDel:
		return ReasonBadIntent
	case in.ID == "" || !utf8.ValidString(in.ID):
		return ReasonBadIntent
	case len(in.ID) > MaxIDLen:
		return ReasonTooLarge
	case len(in.Path) > MaxPathLen:
		return ReasonTooLarge
	case !ValidPath(in.Path):
		return ReasonBadPath
	case len(in.Value) > MaxValueLen:
		return ReasonTooLarge
	case in.Op == OpDel && len(in.Value) > 0:
		return ReasonBadIntent
	}
	return ""
}

// ValidPath reports whether p is a record path: printable ASCII without spaces, at most
// MaxPathLen bytes, made of at least two non-empty segments separated by '/'
// ("collection/rkey"). Keys without '/' are reserved for the state machine.
func ValidPath(p string) bool {
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
