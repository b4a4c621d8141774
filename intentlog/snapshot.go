package intentlog

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// The snapshot is a canonical logical dump of the state, not bbolt's file bytes, so two
// replicas that applied the same entries produce byte-identical snapshots:
//
//	magic "baton-intentlog-snapshot\n" | version byte (layoutVersion) | uvarint applied index
//	for each bucket, in the fixed order of allBuckets:
//	    uvarint-length name | (0x01 | len key | key | len value | value)* | 0x00
//	SHA-256 of everything before it (32 bytes)
//
// Keys appear in bbolt's (byte-wise sorted) order; Restore checks the order, the bucket
// names, the meta record and the checksum before it replaces anything. A snapshot of
// an older layout (version byte) is converted to the current one while it is loaded
// (convert.go), so a replica of a newer build can restore what an older one wrote.

const (
	snapMagic = "baton-intentlog-snapshot\n"
	// restoreTxBytes bounds how much one restore transaction writes.
	restoreTxBytes = 32 << 20
)

// Snapshot returns quickly: it only opens a bbolt read transaction, which Persist then
// streams from while Apply carries on (raft.FSM).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return nil, ErrClosed
	}
	if fe := f.halted(); fe != nil {
		// Raft would record the snapshot at its own applied index and compact the log
		// up to it, past the entry this replica never applied.
		return nil, fmt.Errorf("snapshot refused: %w", fe)
	}
	tx, err := f.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("snapshot: begin read: %w", err)
	}
	return &fsmSnapshot{f: f, tx: tx}, nil
}

type fsmSnapshot struct {
	f  *FSM
	tx *bolt.Tx
}

// Persist writes the dump to sink and closes it (or cancels it on error).
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.f.writeDump(s.tx, sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release ends the read transaction.
func (s *fsmSnapshot) Release() { _ = s.tx.Rollback() }

// writeDump writes the canonical dump of the state visible in tx. It verifies every
// value as it goes: a snapshot of corrupt state would spread it to the replicas that
// install it, so a value that does not verify fails the dump and halts this FSM.
func (f *FSM) writeDump(tx *bolt.Tx, w io.Writer) error {
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	var scratch []byte
	put := func(b []byte) { _, _ = bw.Write(b) } // bufio keeps the first error
	putUv := func(v uint64) { scratch = binary.AppendUvarint(scratch[:0], v); put(scratch) }

	m, err := readMeta(tx)
	if err != nil {
		return err
	}
	put([]byte(snapMagic))
	put([]byte{layoutVersion})
	putUv(m.Applied)
	for _, name := range allBuckets {
		putUv(uint64(len(name)))
		put(name)
		c := tx.Bucket(name).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if _, err := f.openValue(name, k, v); err != nil {
				return err
			}
			put([]byte{1})
			putUv(uint64(len(k)))
			put(k)
			putUv(uint64(len(v)))
			put(v)
		}
		put([]byte{0})
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(h.Sum(nil))
	return err
}

// Dump writes the canonical snapshot encoding of the current state to w (the bytes a
// Raft snapshot would hold). Two replicas that applied the same entries write the same
// bytes.
func (f *FSM) Dump(w io.Writer) error {
	return f.read(func(tx *bolt.Tx) error { return f.writeDump(tx, w) })
}

// snapReader reads a dump while hashing it.
type snapReader struct {
	r *bufio.Reader
	h hash.Hash
}

func (s *snapReader) ReadByte() (byte, error) {
	b, err := s.r.ReadByte()
	if err == nil {
		s.h.Write([]byte{b})
	}
	return b, err
}

func (s *snapReader) full(n uint64, limit uint64) ([]byte, error) {
	if n > limit {
		return nil, fmt.Errorf("%w: snapshot field of %d bytes", ErrMalformed, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated snapshot: %v", ErrMalformed, err)
	}
	s.h.Write(b)
	return b, nil
}

func (s *snapReader) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(s)
	if err != nil {
		return 0, fmt.Errorf("%w: snapshot varint: %v", ErrMalformed, err)
	}
	return v, nil
}

func (s *snapReader) header() (version byte, applied uint64, err error) {
	magic, err := s.full(uint64(len(snapMagic)), uint64(len(snapMagic)))
	if err != nil || string(magic) != snapMagic {
		return 0, 0, fmt.Errorf("%w: not an intentlog snapshot", ErrMalformed)
	}
	v, err := s.ReadByte()
	if err != nil || !convertible(v) {
		return 0, 0, fmt.Errorf("%w: snapshot layout version %d (this build reads %d to %d)", ErrMalformed, v, minLayoutVersion, layoutVersion)
	}
	applied, err = s.uvarint()
	return v, applied, err
}

// SnapshotAppliedIndex reads only the header of a dump and returns the applied index
// of the state it holds.
func SnapshotAppliedIndex(r io.Reader) (uint64, error) {
	s := &snapReader{r: bufio.NewReader(r), h: sha256.New()}
	_, applied, err := s.header()
	return applied, err
}

// Restore replaces the whole state with the dump read from rc (raft.FSM). It loads the
// dump into a new file beside the state file and renames it into place only after the
// dump validated, so a bad snapshot returns an error and the old state is kept.
//
// A snapshot whose applied index is at or below this state's is not restored: the
// state is kept, and Raft's replay of the entries after the snapshot applies nothing
// twice (the apply skips indexes it has applied). hashicorp/raft installs whatever
// snapshot a leader of the current term sends, even one older than the follower's
// applied state: a duplicated or late InstallSnapshot rolled a replica back to an
// older state (its lease epoch went back from 3 to 2, and it never caught up again:
// the simulator's seed 401657). The committed log is one history, so a snapshot at or
// below the applied index holds nothing this state lacks.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	if head, err := br.Peek(len(snapMagic) + 1 + binary.MaxVarintLen64); err == nil || errors.Is(err, io.EOF) {
		if idx, herr := SnapshotAppliedIndex(bytes.NewReader(head)); herr == nil {
			if applied := f.View().AppliedIndex; idx <= applied && applied > 0 {
				f.staleRestores.Add(1)
				return nil
			}
		}
	}
	rc = io.NopCloser(br)
	// The restored state's records come from entries this replica may never have
	// stored, or stored as other entries since replaced: no store time may vouch for
	// them (Log.StoredAt). Forgotten before the state changes (and only when it does:
	// a stale snapshot, above, changes nothing), so that no reader sees the new state
	// with an old time.
	f.stored.clear()
	tmp := f.path + ".restore"
	if err := removeIfExists(tmp); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := loadDump(rc, tmp, f.verify); err != nil {
		_ = removeIfExists(tmp)
		return fmt.Errorf("restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		_ = removeIfExists(tmp)
		return ErrClosed
	}
	if err := f.db.Close(); err != nil {
		return fmt.Errorf("restore: close old state: %w", err)
	}
	f.db = nil
	if err := os.Rename(tmp, f.path); err != nil {
		if db, oerr := openState(f.path); oerr == nil { // keep serving the old state
			f.db = db
		}
		return fmt.Errorf("restore: %w", err)
	}
	syncDir(filepath.Dir(f.path))
	db, err := openState(f.path)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f.db = db
	if err := f.loadHot(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f.restores.Add(1)
	// The state was replaced wholesale: a fault of the old one no longer applies (a
	// corrupt entry at or below the snapshot is not needed any more; one above it
	// halts again when it is reached).
	f.fault.Store(nil)
	f.notify.publish([]Event{StateRestored{AppliedIndex: f.View().AppliedIndex}})
	return nil
}

// loadDump validates a dump while writing it into a new bbolt file at path.
func loadDump(r io.Reader, path string, verify CommitVerifier) (err error) {
	s := &snapReader{r: bufio.NewReaderSize(r, 64<<10), h: sha256.New()}
	version, _, err := s.header()
	if err != nil {
		return err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, PageSize: statePageSize})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}()
	tx, err := db.Begin(true)
	if err != nil {
		return err
	}
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	var metaSeen bool
	for _, want := range bucketsOf(version) {
		n, err := s.uvarint()
		if err != nil {
			return err
		}
		name, err := s.full(n, 64)
		if err != nil {
			return err
		}
		if !bytes.Equal(name, want) {
			return fmt.Errorf("%w: snapshot bucket %q, want %q", ErrMalformed, name, want)
		}
		var prev []byte
		written := 0
		for {
			more, err := s.ReadByte()
			if err != nil {
				return fmt.Errorf("%w: truncated snapshot", ErrMalformed)
			}
			if more == 0 {
				break
			}
			if more != 1 {
				return fmt.Errorf("%w: snapshot record marker %d", ErrMalformed, more)
			}
			kn, err := s.uvarint()
			if err != nil {
				return err
			}
			k, err := s.full(kn, bolt.MaxKeySize)
			if err != nil {
				return err
			}
			vn, err := s.uvarint()
			if err != nil {
				return err
			}
			v, err := s.full(vn, maxField)
			if err != nil {
				return err
			}
			if len(k) == 0 || (prev != nil && bytes.Compare(prev, k) >= 0) {
				return fmt.Errorf("%w: snapshot keys out of order in %s", ErrMalformed, name)
			}
			prev = k
			// Verify the value (converting it from an older layout first).
			if v, err = loadValue(tx, version, name, k, v, verify); err != nil {
				return fmt.Errorf("snapshot value %s: %w", keyName(name, k), err)
			}
			if bytes.Equal(name, bMeta) && bytes.Equal(k, keyState) {
				metaSeen = true
			}
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
			if written += len(k) + len(v); written > restoreTxBytes {
				if err := tx.Commit(); err != nil {
					return err
				}
				if tx, err = db.Begin(true); err != nil {
					return err
				}
				written = 0
			}
		}
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	sum := s.h.Sum(nil)
	got := make([]byte, 32)
	if _, err := io.ReadFull(s.r, got); err != nil || !bytes.Equal(got, sum) {
		return fmt.Errorf("%w: snapshot checksum mismatch", ErrMalformed)
	}
	if _, err := s.r.ReadByte(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing bytes after snapshot", ErrMalformed)
	}
	if !metaSeen {
		return fmt.Errorf("%w: snapshot has no meta state", ErrMalformed)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	tx = nil
	return db.Sync()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
