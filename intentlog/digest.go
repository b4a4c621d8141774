package intentlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// The state digest: a rolling hash of everything applied, for comparing replicas
// (etcd's corruption check does the same). After every applied entry, command or
// configuration:
//
//	digest := SHA-256(digest | index (8 bytes big-endian) | raft.LogType (1 byte) |
//	                  uvarint len(data) | data | accepted (1 byte) | uvarint len(reason) | reason)
//
// Two replicas that applied the same entries with the same outcomes have the same
// digest at the same index, however their batches were split and whether they got
// there by snapshot or by replay; one whose state diverged (a bug, a bad disk, an apply
// that differs) differs from the entry on. The digest lives in the meta record (so in
// snapshots), and a checkpoint of it is kept at the first applied index of every block
// of DigestEvery indexes, the last DigestKeep of them, so that replicas can compare at
// a common index (DigestAt) while they apply at different paces.
//
// The digest starts at the first entry of codec version 2: the version-1 prefix of a
// log written by an older build is not digested, because a replica that converts that
// build's snapshot cannot know the digest of what the snapshot covers, and it must
// agree with a replica that replays the prefix. Entries Raft never hands to the FSM
// (no-ops, barriers) are not part of it.
//
// Comparing replicas and acting on a difference (an alarm; the replica never claims or
// signs) is the node's job: this package computes and keeps the digest.

const (
	// DigestEvery is the spacing of digest checkpoints, in log indexes.
	DigestEvery = 1024
	// DigestKeep is how many digest checkpoints are kept (the most recent).
	DigestKeep = 64
)

// digest folds an applied entry into the state digest. start: the entry may start the
// digest (a version-2 command); other entries only continue it.
func (a *applier) digest(l *raft.Log, accepted bool, reason Reason, start bool) {
	if a.m.DigestIndex == 0 && !start {
		return
	}
	a.m.Digest = digestStep(a.m.Digest, l, accepted, reason)
	prev := a.m.DigestIndex
	a.m.DigestIndex = l.Index
	if prev/a.digestEvery == l.Index/a.digestEvery {
		return
	}
	// The first applied index of a new block: a checkpoint.
	a.put(bDigests, u64key(l.Index), a.m.Digest[:])
	a.m.DigestCount++
	for a.m.DigestCount > a.digestKeep {
		c := a.tx.Bucket(bDigests).Cursor()
		if k, _ := c.First(); k == nil {
			a.corrupt(bMeta, keyState, "digest checkpoint count %d exceeds the bucket", a.m.DigestCount)
		}
		must(c.Delete())
		a.m.DigestCount--
	}
}

func digestStep(prev [32]byte, l *raft.Log, accepted bool, reason Reason) [32]byte {
	h := sha256.New()
	var b [8 + 1 + binary.MaxVarintLen64]byte
	h.Write(prev[:])
	binary.BigEndian.PutUint64(b[:8], l.Index)
	b[8] = byte(l.Type)
	n := binary.PutUvarint(b[9:], uint64(len(l.Data)))
	h.Write(b[:9+n])
	h.Write(l.Data)
	out := binary.AppendUvarint([]byte{0}, uint64(len(reason)))
	if accepted {
		out[0] = 1
	}
	h.Write(out)
	h.Write([]byte(reason))
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Digest returns the state digest and the index of the last entry it covers (0 and
// the zero digest before it started). It reads local state; it does not wait on Raft.
func (f *FSM) Digest() (index uint64, d [32]byte) {
	v := f.hot.Load()
	return v.digestIdx, v.digest
}

// Digest returns the local replica's state digest and the index it is at (see
// digest.go): two replicas that applied the same entries have the same digest at the
// same index.
func (l *Log) Digest() (index uint64, d [32]byte) { return l.fsm.Digest() }

// DigestAt returns the digest checkpoint at index, if this replica keeps one there:
// checkpoints sit at the first applied index of every block of DigestEvery indexes,
// the last DigestKeep of them (DigestCheckpoints lists them). Replicas in step keep
// checkpoints at the same indexes.
func (l *Log) DigestAt(index uint64) ([32]byte, bool) {
	var d [32]byte
	ok := false
	err := l.fsm.read(func(tx *bolt.Tx) error {
		v := tx.Bucket(bDigests).Get(u64key(index))
		if v == nil {
			return nil
		}
		p, err := l.fsm.openValue(bDigests, u64key(index), v)
		if err != nil {
			return err
		}
		if len(p) != 32 {
			return fmt.Errorf("%w: digest checkpoint %d is %d bytes", ErrCorrupt, index, len(p))
		}
		copy(d[:], p)
		ok = true
		return nil
	})
	if err != nil {
		return [32]byte{}, false
	}
	return d, ok
}

// DigestCheckpoints returns the indexes of the kept digest checkpoints, oldest first.
func (l *Log) DigestCheckpoints() []uint64 {
	var out []uint64
	_ = l.fsm.read(func(tx *bolt.Tx) error {
		c := tx.Bucket(bDigests).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			out = append(out, keyU64(k))
		}
		return nil
	})
	return out
}
