package atproto

import (
	"bytes"
	"encoding/hex"
	"fmt"
)

// Links finds, along one chain, two commits that name one parent by a link other
// than baton's prev (for checkers: the simulator's, testnet's): two commits with one
// rev (a relay takes a rev as the name of a commit; the apply and the Replayer also
// refuse a rev that is not after the previous one), and two commits with one
// prevData among those that changed the repository (two commits built on one
// repository state). A commit whose intents changed nothing keeps the MST root, so
// the next one names the same prevData, which is allowed; a delete that takes the
// repository back to an earlier state would too, so the rule holds for loads that
// only create records (the drills' and the simulator's). Not safe for concurrent use.
type Links struct {
	rev      map[string]uint64
	prevData map[string]uint64
}

// NewLinks returns an empty book.
func NewLinks() *Links { return &Links{rev: map[string]uint64{}, prevData: map[string]uint64{}} }

// Add books the envelope raw at seq and describes each link it shares with a commit
// booked before. An envelope that does not decode is skipped (verification reports
// it).
func (l *Links) Add(seq uint64, raw []byte) []string {
	e, err := DecodeEnvelope(raw)
	if err != nil {
		return nil
	}
	var out []string
	rev := e.Repo.Rev
	if first, dup := l.rev[rev]; dup {
		out = append(out, fmt.Sprintf("seq %d and seq %d share rev %s", first, seq, rev))
	} else {
		l.rev[rev] = seq
	}
	if e.PrevData != nil && !bytes.Equal(e.PrevData, e.Repo.Data) {
		pk := hex.EncodeToString(e.PrevData)
		if first, dup := l.prevData[pk]; dup {
			out = append(out, fmt.Sprintf("seq %d and seq %d share prevData %s", first, seq, pk[:min(len(pk), 16)]))
		} else {
			l.prevData[pk] = seq
		}
	}
	return out
}
