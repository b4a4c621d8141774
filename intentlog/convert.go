package intentlog

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Loading snapshot values, and converting those of older layouts (see layoutVersion).
// A snapshot written by an older build is converted value by value as it streams in,
// in the dump's bucket order, so memory stays bounded and the restore's chunked
// transactions stay small. The conversion reads only the snapshot's contents, and
// yields exactly the state that replaying the older build's log with this build gives
// (TestV1SnapshotConvertsToReplayedState): every replica converges on the same state
// whether it converts an old snapshot or replays an old log.

// minLayoutVersion is the oldest snapshot layout this build converts.
const minLayoutVersion = 1

// convertible reports whether a snapshot of layout v can be restored: this layout, or
// layout 1. The layouts in between were never released (commits of one branch).
func convertible(v byte) bool { return v == layoutVersion || v == minLayoutVersion }

// bucketsOf returns the buckets a snapshot of layout v holds, in dump order.
func bucketsOf(v byte) [][]byte {
	if v == 1 {
		return [][]byte{bChain, bDedupe, bDedupeOrder, bHistory, bMembers, bMeta, bPending, bRecords, bRejections}
	}
	return allBuckets
}

// loadValue returns the value to store for bucket/key of a snapshot of layout v:
// verified as it is for the current layout, converted (and sealed) for layout 1. tx is
// the restore's transaction, holding the buckets that came before in the dump.
func loadValue(tx *bolt.Tx, v byte, bucket, key, value []byte, verify CommitVerifier) ([]byte, error) {
	if v == layoutVersion {
		if _, err := openStored(bucket, key, value); err != nil {
			return nil, err
		}
		return value, nil
	}
	switch string(bucket) {
	case string(bChain):
		return sealChain(value), nil
	case string(bDedupe):
		return convertDedupeV1(tx, key, value)
	case string(bMeta):
		if string(key) != string(keyState) {
			break
		}
		return convertMetaV1(tx, value, verify)
	}
	return seal(bucket, key, value), nil
}

// convertDedupeV1: layout 4 added the log time (0 for IDs accepted before log time
// existed, as a replay of version-1 entries records them) and the hash of the commit
// that signed the ID, read from the chain (the dump holds the chain first).
func convertDedupeV1(tx *bolt.Tx, key, value []byte) ([]byte, error) {
	r := &rbuf{b: value}
	e := dedupeEntry{Order: r.uvarint(), Index: r.uvarint(), Seq: r.uvarint()}
	if err := r.done(); err != nil {
		return nil, err
	}
	if e.Seq > 0 {
		stored := tx.Bucket(bChain).Get(u64key(e.Seq))
		if stored == nil {
			return nil, fmt.Errorf("%w: dedupe entry %q names commit %d, which the chain lacks", ErrMalformed, key, e.Seq)
		}
		var err error
		if _, e.Hash, err = unsealChain(stored); err != nil {
			return nil, err
		}
	}
	return seal(bDedupe, key, e.encode()), nil
}

// convertMetaV1 rewrites a layout-1 meta record (the dump holds the chain and the
// lease history before it).
func convertMetaV1(tx *bolt.Tx, value []byte, verify CommitVerifier) ([]byte, error) {
	m, err := decodeMetaV1(value)
	if err != nil {
		return nil, err
	}
	// Layout 2: the lease record's revision is the index of the last accepted lease
	// entry, which is the newest lease history event (every accepted lease entry
	// appends one, and eviction drops the oldest).
	if k, stored := tx.Bucket(bHistory).Cursor().Last(); k != nil {
		p, err := unseal(bHistory, k, stored)
		if err != nil {
			return nil, err
		}
		r := &rbuf{b: p}
		ev := decodeLeaseEvent(r)
		if err := r.done(); err != nil {
			return nil, fmt.Errorf("lease history %x: %w", k, err)
		}
		m.Lease.Rev = ev.Index
	}
	// Layout 3: the chain DID. A layout-1 state has no genesis; replaying its log
	// fixes the chain with the first accepted commit, and every accepted commit
	// carries that DID, so the head commit names it.
	if m.Head.Seq > 0 && verify != nil {
		if stored := tx.Bucket(bChain).Get(u64key(m.Head.Seq)); stored != nil {
			raw, _, err := unsealChain(stored)
			if err != nil {
				return nil, err
			}
			if info, ok := verifySafely(verify, raw); ok {
				m.Chain = info.Chain
			}
		}
	}
	// Layout 4: log time stays 0 (version-1 entries do not keep it). Layout 5: sealed.
	// Layout 6: the digest has not started (a log's version-1 prefix is not digested).
	return m.encode(), nil
}

// decodeMetaV1 reads a layout-1 meta record.
func decodeMetaV1(b []byte) (metaState, error) {
	r := &rbuf{b: b}
	var m metaState
	if v := r.byte1(); r.err == nil && v != 1 {
		return m, fmt.Errorf("%w: meta layout version %d, want 1", ErrMalformed, v)
	}
	m.Applied = r.uvarint()
	m.Lease = decodeLeaseV1(r)
	m.Head = decodeHead(r)
	for _, p := range []*uint64{&m.PendNext, &m.PendCount, &m.PendBytes, &m.DedupeNext,
		&m.DedupeCount, &m.HistNext, &m.HistCount, &m.ConfigIndex} {
		*p = r.uvarint()
	}
	return m, r.done()
}
