package intentlog

import (
	"crypto/sha256"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Conversion of older layouts (see layoutVersion). A snapshot written by an older
// build is loaded bucket by bucket as it was written and then rewritten, inside the
// restore's last transaction, into the current layout. The conversion reads only the
// snapshot's contents, so every replica that converts the same snapshot ends with the
// same state.

// minLayoutVersion is the oldest snapshot layout this build converts.
const minLayoutVersion = 1

func convertible(v byte) bool { return v >= minLayoutVersion && v <= layoutVersion }

// bucketsOf returns the buckets a snapshot of layout v holds, in dump order.
func bucketsOf(v byte) [][]byte {
	return allBuckets // unchanged so far
}

// checkMeta validates the meta record of a snapshot of layout v.
func checkMeta(v byte, b []byte) error {
	if metaLayout(b) != v {
		return fmt.Errorf("%w: snapshot of layout %d holds a meta record of layout %d", ErrMalformed, v, metaLayout(b))
	}
	var err error
	if v == 1 {
		_, err = decodeMetaV1(b)
	} else {
		_, err = decodeMeta(b)
	}
	return err
}

// convertLayout rewrites the state in tx from layout v to the current one. verify is
// the FSM's commit verifier (a legacy state's chain DID is the one its commits carry).
func convertLayout(tx *bolt.Tx, v byte, verify CommitVerifier) error {
	if v != 1 {
		return fmt.Errorf("%w: no conversion from layout %d", ErrMalformed, v)
	}
	m, err := decodeMetaV1(tx.Bucket(bMeta).Get(keyState))
	if err != nil {
		return err
	}
	// Layout 2: the lease record's revision is the index of the last accepted lease
	// entry, which is the newest lease history event (every accepted lease entry
	// appends one, and eviction drops the oldest).
	if k, val := tx.Bucket(bHistory).Cursor().Last(); k != nil {
		r := &rbuf{b: val}
		ev := decodeLeaseEvent(r)
		if err := r.done(); err != nil {
			return fmt.Errorf("lease history %x: %w", k, err)
		}
		m.Lease.Rev = ev.Index
	}
	// Layout 3: the chain DID. A layout-1 state has no genesis; replaying its log
	// fixes the chain with the first accepted commit, and every accepted commit
	// carries that DID, so the head commit names it.
	if m.Head.Seq > 0 && verify != nil {
		if raw := tx.Bucket(bChain).Get(u64key(m.Head.Seq)); raw != nil {
			if info, ok := verifySafely(verify, raw); ok {
				m.Chain = info.Chain
			}
		}
	}
	// Layout 4: log time. Version-1 entries do not keep log time (so that this
	// conversion and a replay agree): the converted state has log time 0, and its
	// remembered IDs were accepted at log time 0. Their entries gain the hash of the
	// commit that signed them, read from the chain.
	d := tx.Bucket(bDedupe)
	c := d.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r := &rbuf{b: v}
		e := dedupeEntry{Order: r.uvarint(), Index: r.uvarint(), Seq: r.uvarint()}
		if err := r.done(); err != nil {
			return fmt.Errorf("dedupe entry %q: %w", k, err)
		}
		if e.Seq > 0 {
			raw := tx.Bucket(bChain).Get(u64key(e.Seq))
			if raw == nil {
				return fmt.Errorf("%w: dedupe entry %q names commit %d, which the chain lacks", ErrMalformed, k, e.Seq)
			}
			e.Hash = sha256.Sum256(raw)
		}
		k = append([]byte{}, k...)
		if err := d.Put(k, e.encode()); err != nil {
			return err
		}
		c.Seek(k) // a write may invalidate the cursor: reposition it
	}
	return tx.Bucket(bMeta).Put(keyState, m.encode())
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
