package atproto

import (
	"bytes"
	"fmt"
)

// Event is a #commit event of com.atproto.sync.subscribeRepos for one commit, as any
// replica can build it from the commit's step and the head before it: the same
// commit gives the same event on every replica.
type Event struct {
	Repo     string   // the repository DID
	Rev      string   // the commit's rev
	Since    string   // the previous commit's rev ("" for the first)
	Commit   []byte   // CID of the commit block
	PrevData []byte   // the previous commit's data (nil for the first)
	Ops      []RepoOp // one per op, with the record's CID and prev CID
	Blocks   []byte   // a CAR slice: the commit block, the new MST nodes and records
}

// NewEvent builds the event of step, the commit applied on top of prev.
func NewEvent(prev Head, step Step) (Event, error) {
	ev := Event{Repo: step.Head.DID, Rev: step.Head.Rev, Since: prev.Rev, Commit: step.Head.Commit,
		PrevData: prev.Data, Ops: step.Ops}
	// The commit block first (readers look for the root), then the rest in CID order.
	bl := make([]Block, 0, len(step.Blocks))
	for _, b := range step.Blocks {
		if bytes.Equal(b.CID, step.Head.Commit) {
			bl = append([]Block{b}, bl...)
		} else {
			bl = append(bl, b)
		}
	}
	if len(bl) == 0 || !bytes.Equal(bl[0].CID, step.Head.Commit) {
		return ev, fmt.Errorf("event: the step has no commit block")
	}
	var car bytes.Buffer
	if err := WriteCAR(&car, step.Head.Commit, bl); err != nil {
		return ev, err
	}
	ev.Blocks = car.Bytes()
	return ev, nil
}
