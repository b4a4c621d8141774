package intentlog

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// IntentStatus reports what the dedupe window remembers about intent id: the Raft
// index of the entry that accepted it and, once signed, the seq of the commit that
// signed it (Accepted is true, Duplicate false). ok is false when the ID is not in
// the window (never accepted, or evicted). It reads local state; it does not wait on
// Raft.
func (l *Log) IntentStatus(id string) (res IntentResult, ok bool, err error) {
	err = l.fsm.read(func(tx *bolt.Tx) error {
		v := tx.Bucket(bDedupe).Get([]byte(id))
		if v == nil {
			return nil
		}
		d, err := decodeDedupe(v)
		if err != nil {
			return fmt.Errorf("intent status %q: %w", id, err)
		}
		res, ok = IntentResult{ID: id, Accepted: true, Index: d.Index, Seq: d.Seq}, true
		return nil
	})
	return res, ok, err
}
