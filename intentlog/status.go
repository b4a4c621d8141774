package intentlog

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// IntentStatus reports what the dedupe window remembers about intent id: its original
// result (Accepted true, Duplicate false): the Raft index of the entry that accepted
// it, the log time then, and once signed the seq and hash of the commit that signed
// it. ok is false when the ID is not in the window (never accepted, or forgotten after
// the retention). It reads local state; it does not wait on Raft.
func (l *Log) IntentStatus(id string) (res IntentResult, ok bool, err error) {
	err = l.fsm.read(func(tx *bolt.Tx) error {
		v := tx.Bucket(bDedupe).Get([]byte(id))
		if v == nil {
			return nil
		}
		p, err := l.fsm.openValue(bDedupe, []byte(id), v)
		if err != nil {
			return err
		}
		d, err := decodeDedupe(p)
		if err != nil {
			return fmt.Errorf("intent status %q: %w", id, err)
		}
		res, ok = d.result(id), true
		return nil
	})
	if err != nil {
		return IntentResult{}, false, err
	}
	return res, ok, nil
}
