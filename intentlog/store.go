package intentlog

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The bbolt layout of state.db. Every bucket is part of the replicated state and of
// the snapshot; the snapshot dumps them in the order of allBuckets.
var (
	bMeta        = []byte("meta")         // "state" -> encoded metaState
	bRecords     = []byte("records")      // path -> value
	bPending     = []byte("pending")      // u64 queue seq (big-endian) -> encoded Intent
	bChain       = []byte("chain")        // u64 commit seq -> raw commit
	bDedupe      = []byte("dedupe")       // intent id -> encoded dedupeEntry
	bDedupeOrder = []byte("dedupe_order") // u64 insertion order -> intent id
	bHistory     = []byte("history")      // u64 event number -> encoded LeaseEvent
	bMembers     = []byte("members")      // server id -> suffrage byte + address
	bRejections  = []byte("rejections")   // reason -> u64 count
	bDigests     = []byte("digests")      // u64 index -> state digest checkpoint (32 bytes)

	allBuckets = [][]byte{bChain, bDedupe, bDedupeOrder, bDigests, bHistory, bMembers, bMeta,
		bPending, bRecords, bRejections} // sorted by name

	keyState = []byte("state")
)

// metaState is the small, fixed-size part of the state, kept as one value in meta.
type metaState struct {
	Applied     uint64 // last applied Raft index (commands and configurations)
	Lease       Lease
	Head        Head
	PendNext    uint64 // next pending queue key
	PendCount   uint64
	PendBytes   uint64
	DedupeNext  uint64 // next dedupe order key
	DedupeCount uint64
	HistNext    uint64 // next history key
	HistCount   uint64
	ConfigIndex uint64 // index of the applied membership configuration
	Chain       string // chain DID (the genesis's, or fixed by the first commit)
	Genesis     Genesis
	LogTime     int64    // unix ms: the latest timestamp of an accepted version-2 entry that carries one
	TimeOrigin  int64    // the first nonzero log time (IDs remembered before it count from it)
	DigestIndex uint64   // the last entry the digest covers (0: not started)
	Digest      [32]byte // the rolling digest of the applied entries (digest.go)
	DigestCount uint64   // checkpoints kept in bDigests
	// Written by version-3 and version-4 entries only (see applier.advance), stored
	// after the other fields and only when one is set, so that a state that no such
	// entry touched keeps layout 6's exact bytes (and StampBy only when set, so that a
	// state no version-4 entry touched keeps the bytes version 3 wrote).
	LastStamp   int64  // the timestamp of the last accepted version-3 or -4 entry that carries one
	TimeClamped uint64 // steps of log time that the bound cut short
	StampBy     string // who wrote LastStamp (a version-4 entry's holder; "": unknown)
	// Lease.Nonce is stored last, only when set (StampBy, possibly empty, before it),
	// so that a state whose lease record has none keeps the bytes of the builds
	// before it.
}

// layoutVersion is the version of state.db's layout and of the snapshot format (the
// snapshot is a dump of the layout, so they move together). It is the first byte of
// the meta record and of a snapshot's header. History:
//
//	1  the first layout (commit a51a2ca and before)
//	2  the lease record carries its revision (Lease.Rev)
//	3  the chain DID and the genesis in meta
//	4  log time; dedupe entries carry log time and commit hash
//	5  every stored value is checksummed (see seal; chain values carry their hash)
//	6  the rolling state digest and its checkpoints
//
// A state.db of an older layout is set aside and rebuilt from the snapshot and the log
// (see NewFSM); a snapshot of an older layout is converted on restore (convert.go).
const layoutVersion = 6

// encode returns the stored (sealed) form of the meta record.
func (m *metaState) encode() []byte {
	w := &wbuf{}
	w.byte1(layoutVersion)
	w.uvarint(m.Applied)
	encodeLease(w, m.Lease)
	encodeHead(w, m.Head)
	for _, v := range []uint64{m.PendNext, m.PendCount, m.PendBytes, m.DedupeNext,
		m.DedupeCount, m.HistNext, m.HistCount, m.ConfigIndex} {
		w.uvarint(v)
	}
	w.str(m.Chain)
	encodeGenesis(w, m.Genesis)
	w.varint(m.LogTime)
	w.varint(m.TimeOrigin)
	w.uvarint(m.DigestIndex)
	w.b = append(w.b, m.Digest[:]...)
	w.uvarint(m.DigestCount)
	if nonce := m.Lease.Nonce; m.LastStamp != 0 || m.TimeClamped != 0 || m.StampBy != "" || nonce != 0 {
		w.varint(m.LastStamp)
		w.uvarint(m.TimeClamped)
		if m.StampBy != "" || nonce != 0 {
			w.str(m.StampBy)
			if nonce != 0 {
				w.uvarint(nonce)
			}
		}
	}
	return seal(bMeta, keyState, w.b)
}

func encodeGenesis(w *wbuf, g Genesis) {
	w.uvarint(g.Index)
	if g.Index == 0 {
		return // none
	}
	w.str(g.Chain)
	w.uvarint(g.Version)
	w.b = append(w.b, g.Nonce[:]...)
	w.varint(g.TS)
	w.varint(g.Retention)
	w.uvarint(g.MaxIDs)
	w.b = append(w.b, g.Hash[:]...)
}

func decodeGenesis(r *rbuf) Genesis {
	var g Genesis
	if g.Index = r.uvarint(); g.Index == 0 {
		return g
	}
	g.Chain = r.str()
	g.Version = r.uvarint()
	if r.err == nil && len(r.b) < GenesisNonceLen {
		r.fail("short genesis nonce")
	} else if r.err == nil {
		copy(g.Nonce[:], r.b)
		r.b = r.b[GenesisNonceLen:]
	}
	g.TS = r.varint()
	g.Retention = r.varint()
	g.MaxIDs = r.uvarint()
	g.Hash = r.hash32()
	return g
}

// decodeMeta verifies and decodes a stored meta record.
func decodeMeta(stored []byte) (metaState, error) {
	var m metaState
	if metaLayout(stored) != layoutVersion {
		return m, fmt.Errorf("%w: meta layout version %d, want %d", ErrMalformed, metaLayout(stored), layoutVersion)
	}
	b, err := unseal(bMeta, keyState, stored)
	if err != nil {
		return m, err
	}
	r := &rbuf{b: b}
	if v := r.byte1(); r.err == nil && v != layoutVersion {
		return m, fmt.Errorf("%w: meta layout version %d, want %d", ErrMalformed, v, layoutVersion)
	}
	m.Applied = r.uvarint()
	m.Lease = decodeLease(r)
	m.Head = decodeHead(r)
	for _, p := range []*uint64{&m.PendNext, &m.PendCount, &m.PendBytes, &m.DedupeNext,
		&m.DedupeCount, &m.HistNext, &m.HistCount, &m.ConfigIndex} {
		*p = r.uvarint()
	}
	m.Chain = r.str()
	m.Genesis = decodeGenesis(r)
	m.LogTime = r.varint()
	m.TimeOrigin = r.varint()
	m.DigestIndex = r.uvarint()
	m.Digest = r.hash32()
	m.DigestCount = r.uvarint()
	if r.err == nil && len(r.b) > 0 {
		m.LastStamp = r.varint()
		m.TimeClamped = r.uvarint()
		if r.err == nil && len(r.b) > 0 {
			m.StampBy = r.str()
			m.Lease.Nonce = r.optNonce()
			if r.err == nil && m.StampBy == "" && m.Lease.Nonce == 0 {
				r.fail("non-canonical log time fields")
			}
		}
		if r.err == nil && m.LastStamp == 0 && m.TimeClamped == 0 && m.StampBy == "" && m.Lease.Nonce == 0 {
			r.fail("non-canonical log time fields")
		}
	}
	return m, r.done()
}

// Stored values. Every value in state.db is stored sealed:
//
//	payload | CRC-32C (Castagnoli, 4 bytes big-endian) of bucket name | 0 | key | payload
//
// so a flipped bit, a torn page or a value that landed under another key is found
// when the value is read (unseal), not served. The chain is the exception: a commit is
// stored as its SHA-256 (the commit hash) followed by its raw bytes, and reading it
// checks the one against the other.

func sealCRC(bucket, key, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, bucket)
	c = crc32.Update(c, castagnoli, []byte{0})
	c = crc32.Update(c, castagnoli, key)
	return crc32.Update(c, castagnoli, payload)
}

// seal returns the stored form of payload at bucket/key.
func seal(bucket, key, payload []byte) []byte {
	out := make([]byte, len(payload), len(payload)+crcSize)
	copy(out, payload)
	return binary.BigEndian.AppendUint32(out, sealCRC(bucket, key, payload))
}

// unseal verifies a stored value and returns its payload (a sub-slice of stored).
func unseal(bucket, key, stored []byte) ([]byte, error) {
	if len(stored) < crcSize {
		return nil, fmt.Errorf("%w: %d-byte value has no checksum", ErrCorrupt, len(stored))
	}
	n := len(stored) - crcSize
	if got, want := binary.BigEndian.Uint32(stored[n:]), sealCRC(bucket, key, stored[:n]); got != want {
		return nil, fmt.Errorf("%w: value checksum %08x, computed %08x", ErrCorrupt, got, want)
	}
	return stored[:n], nil
}

// sealChain returns the stored form of a commit: its hash, then its bytes.
func sealChain(raw []byte) []byte {
	h := sha256.Sum256(raw)
	return append(h[:], raw...)
}

// unsealChain verifies a stored commit and returns its bytes (a sub-slice of stored)
// and hash.
func unsealChain(stored []byte) (raw []byte, hash [32]byte, err error) {
	if len(stored) < 32 {
		return nil, hash, fmt.Errorf("%w: %d-byte commit value has no hash", ErrCorrupt, len(stored))
	}
	copy(hash[:], stored[:32])
	raw = stored[32:]
	if sha256.Sum256(raw) != hash {
		return nil, hash, fmt.Errorf("%w: commit bytes do not hash to the stored commit hash", ErrCorrupt)
	}
	return raw, hash, nil
}

// openStored verifies any stored value of bucket/key and returns its payload.
func openStored(bucket, key, stored []byte) ([]byte, error) {
	if string(bucket) == string(bChain) {
		raw, _, err := unsealChain(stored)
		return raw, err
	}
	if string(bucket) == string(bMeta) && string(key) == string(keyState) {
		if _, err := decodeMeta(stored); err != nil {
			return nil, err
		}
		return stored, nil
	}
	return unseal(bucket, key, stored)
}

// dedupeEntry is what the dedupe window remembers about an accepted intent ID: its
// original result.
type dedupeEntry struct {
	Order   uint64   // key in dedupe_order
	Index   uint64   // Raft index of the entry that accepted it
	LogTime int64    // log time when it was accepted (0: before log time existed)
	Seq     uint64   // commit that signed it, 0 while pending
	Hash    [32]byte // that commit's hash (when Seq > 0)
}

func (d dedupeEntry) encode() []byte {
	w := &wbuf{b: make([]byte, 0, 64)}
	w.uvarint(d.Order)
	w.uvarint(d.Index)
	w.varint(d.LogTime)
	w.uvarint(d.Seq)
	if d.Seq > 0 {
		w.b = append(w.b, d.Hash[:]...)
	}
	return w.b
}

func decodeDedupe(b []byte) (dedupeEntry, error) {
	r := &rbuf{b: b}
	d := dedupeEntry{Order: r.uvarint(), Index: r.uvarint(), LogTime: r.varint(), Seq: r.uvarint()}
	if d.Seq > 0 {
		d.Hash = r.hash32()
	}
	return d, r.done()
}

// result is the original result of the intent id that d remembers.
func (d dedupeEntry) result(id string) IntentResult {
	return IntentResult{ID: id, Accepted: true, Index: d.Index, Seq: d.Seq, Hash: d.Hash, LogTime: d.LogTime}
}

func encodeIntentValue(in Intent) []byte {
	w := &wbuf{b: make([]byte, 0, intentSize(in))}
	encodeIntent(w, in)
	return w.b
}

func decodeIntentValue(b []byte) (Intent, error) {
	r := &rbuf{b: b}
	in := decodeIntent(r)
	return in, r.done()
}

// metaLayout returns the layout version of a stored meta record (0 if there is none).
func metaLayout(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// errOldLayout: the state file holds an older layout (openState's caller sets it aside).
var errOldLayout = errors.New("intentlog: state.db has an older layout")

// statePageSize is the bbolt page size of a state.db this build creates (openState, and
// loadDump for a restored snapshot); a file keeps the page size it was created with.
//
// Each intent a commit signs puts its record (by path) and its dedupe entry (by ID),
// and the intents of one commit, from many clients, land in leaves they do not share:
// bbolt reads every leaf it changes into a node and writes it out whole at commit, so
// the apply's cost grows with the page. 1 KiB pages applied commits of 32 intents from
// 64 clients in two thirds of the time 4 KiB pages took
// (BenchmarkApplyCarried64Clients; docs/BENCHMARKS.md as of 53ac444). Smaller pages than that cost
// more in the deeper tree than they save.
const statePageSize = 1024

// openState opens (creating if needed) a bbolt state file with every bucket present. A
// file of an older layout is left untouched and reported with errOldLayout; one of a
// newer layout (a downgrade) is refused.
func openState(path string) (*bolt.DB, error) {
	// A large initial mmap keeps bbolt from remapping while a snapshot's long read
	// transaction is open (a remap waits for every read transaction, stalling apply).
	// NoSync: Raft's log is the durable record; state.db is its checkpoint (see
	// CleanFile). Close syncs it.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, PageSize: statePageSize,
		InitialMmapSize: 1 << 30, FreelistType: bolt.FreelistMapType, NoSync: true})
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bMeta)
		if b == nil {
			return nil
		}
		switch v := metaLayout(b.Get(keyState)); {
		case v == 0 || v == layoutVersion:
			return nil
		case v < layoutVersion:
			return fmt.Errorf("%w (layout %d, this build writes %d)", errOldLayout, v, layoutVersion)
		default:
			return fmt.Errorf("state %s has layout %d, newer than this build's %d (a downgrade): refusing to touch it", path, v, layoutVersion)
		}
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if tx.Bucket(bMeta).Get(keyState) == nil {
			return tx.Bucket(bMeta).Put(keyState, (&metaState{}).encode())
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init state %s: %w", path, err)
	}
	return db, nil
}

// readMeta loads the meta state of tx.
func readMeta(tx *bolt.Tx) (metaState, error) {
	m, err := decodeMeta(tx.Bucket(bMeta).Get(keyState))
	if err != nil {
		return m, fmt.Errorf("%s: meta/state: %w", StateFile, err)
	}
	return m, nil
}

// keyName names a stored key for a message: bucket/key, with the sequential (8-byte
// big-endian) keys as numbers and the others quoted.
func keyName(bucket, key []byte) string {
	switch string(bucket) {
	case string(bPending), string(bChain), string(bDedupeOrder), string(bHistory), string(bDigests):
		if len(key) == 8 {
			return fmt.Sprintf("%s/%d", bucket, keyU64(key))
		}
	case string(bMeta):
		return fmt.Sprintf("%s/%s", bucket, key)
	}
	return fmt.Sprintf("%s/%q", bucket, key)
}

func readRejections(tx *bolt.Tx) (map[Reason]uint64, error) {
	out := make(map[Reason]uint64)
	c := tx.Bucket(bRejections).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		n, err := unseal(bRejections, k, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", StateFile, keyName(bRejections, k), err)
		}
		out[Reason(k)] = keyU64(n)
	}
	return out, nil
}

// setAside renames the file at path to a name of the form path.why, path.why.1, ...
// that does not exist yet, so that nothing set aside earlier is ever overwritten, and
// returns the new name.
func setAside(path, why string) (string, error) {
	base := path + "." + why
	for i := 0; ; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s.%d", base, i)
		}
		if _, err := os.Lstat(name); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("set aside %s: %w", path, err)
		}
		// Link then remove rather than rename: rename would replace a file created
		// at name in the meantime, link fails instead.
		if err := os.Link(path, name); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			// A file system without hard links: rename (the name was free a moment ago).
			if rerr := os.Rename(path, name); rerr != nil {
				return "", fmt.Errorf("set aside %s: %w", path, rerr)
			}
			syncDir(filepath.Dir(path))
			return name, nil
		}
		if err := os.Remove(path); err != nil {
			return "", fmt.Errorf("set aside %s: %w", path, err)
		}
		syncDir(filepath.Dir(path))
		return name, nil
	}
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
