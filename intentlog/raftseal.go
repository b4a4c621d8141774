package intentlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sort"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// Sealed raft.db (issue 20 item 1). raft-boltdb stores each Raft log entry (index,
// term, type, data, extensions) and the stable store (CurrentTerm, LastVoteTerm,
// LastVoteCand) without a checksum. The codec's checksum covers a command's data only,
// so a flipped bit in an entry's term, index or type, in a configuration entry, or in
// the term and vote, passed every check: a device with a "greater" last term won an
// election with entries it never had and truncated committed entries elsewhere.
//
// Every byte Raft trusts is therefore sealed with a CRC-32C, computed in the wrappers
// Raft writes through and verified by every read (the start check reads them all):
//
//   - an entry: its Extensions (which baton does not otherwise use, and which Raft
//     neither reads nor replicates from the store's copy: the wrapper strips the seal
//     on read) end with crc32c(index, term, type, len(data), data, extensions) and
//     sealTag. AppendedAt is not covered: Raft uses it for metrics only.
//   - a stable value: value || crc32c(len(key), key, value) || sealTag. The key is in
//     the sum, so a value moved to another key does not verify either.
//   - the marker sealMarkerKey in the stable store says the file is sealed: from then
//     on an entry or a value without a seal is corrupt.
//
// Backwards compatibility: a raft.db written before (no marker) is checked as before
// (bbolt structure, every entry decodes, under its own index, the codec checksum) and
// then sealed once at Open, with a warning in the log: its entries' terms and the vote
// were not covered before, so a bit flipped before the upgrade cannot be found. An
// upgrade interrupted by a crash is taken up again at the next start (a file without
// the marker may hold sealed and bare entries; a sealed one must verify). A binary
// older than this one must not be started on a sealed raft.db: it would read the vote
// with the seal as part of the candidate's ID.

// sealTag ends every seal; sealSize is the seal's length (the CRC and the tag).
const (
	sealTag  byte = 0xB5
	sealSize      = crcSize + 1
)

// sealMarkerKey is the stable-store key whose presence says raft.db is sealed.
var sealMarkerKey = []byte("BatonSealed")

// sealMarkerValue is the marker's value (before its own seal): the seal's version.
var sealMarkerValue = []byte{1}

// stableKeys are the keys hashicorp/raft (v1.7) keeps in the stable store; a key
// other than these and the marker in raft.db's stable store bucket is corrupt (a
// flipped bit in a key's name).
var stableKeys = map[string]bool{"CurrentTerm": true, "LastVoteTerm": true, "LastVoteCand": true, string(sealMarkerKey): true}

// u64Keys hold a uint64 (8 bytes, big-endian).
var u64Keys = map[string]bool{"CurrentTerm": true, "LastVoteTerm": true}

// stableBucket is raft-boltdb's bucket of the stable store.
var stableBucket = []byte("conf")

// entryCRC is the checksum of an entry with the given extensions (the stored
// extensions without the seal). The fixed-size header goes through the table byte by
// byte: a header array handed to crc32.Update would escape (one allocation per entry).
func entryCRC(l *raft.Log, ext []byte) uint32 {
	c := ^uint32(0)
	c = crcUint(c, l.Index, 8)
	c = crcUint(c, l.Term, 8)
	c = crcUint(c, uint64(l.Type), 1)
	c = crcUint(c, uint64(len(l.Data)), 4)
	c = crc32.Update(^c, castagnoli, l.Data)
	return crc32.Update(c, castagnoli, ext)
}

// crcUint feeds the n low bytes of v, big-endian, to the running (inverted) CRC-32C c:
// the same as crc32.Update over those bytes.
func crcUint(c uint32, v uint64, n int) uint32 {
	for i := n - 1; i >= 0; i-- {
		c = castagnoli[byte(c)^byte(v>>(8*i))] ^ (c >> 8)
	}
	return c
}

// appendEntrySeal appends l's extensions and their seal to b.
func appendEntrySeal(b []byte, l *raft.Log) []byte {
	b = append(b, l.Extensions...)
	b = binary.BigEndian.AppendUint32(b, entryCRC(l, l.Extensions))
	return append(b, sealTag)
}

// errNoSeal: an entry or value of a sealed raft.db carries no seal.
var errNoSeal = errors.New("no checksum (the file is sealed: every entry and value carries one)")

// unsealEntry verifies l's seal and removes it from l.Extensions. A bare entry (no
// extensions at all: written before the upgrade) is errNoSeal. Errors wrap ErrCorrupt.
func unsealEntry(l *raft.Log) error {
	ext := l.Extensions
	n := len(ext) - sealSize
	if len(ext) == 0 {
		return fmt.Errorf("%w: %w", ErrCorrupt, errNoSeal)
	}
	if n < 0 || ext[len(ext)-1] != sealTag {
		return fmt.Errorf("%w: entry checksum missing or damaged (%d bytes of extensions)", ErrCorrupt, len(ext))
	}
	body := ext[:n]
	if got, want := binary.BigEndian.Uint32(ext[n:]), entryCRC(l, body); got != want {
		return fmt.Errorf("%w: entry checksum %08x, computed %08x over its index, term, type and data", ErrCorrupt, got, want)
	}
	if n == 0 {
		body = nil
	}
	l.Extensions = body
	return nil
}

// stableCRC is the checksum of a stable value under key.
func stableCRC(key, v []byte) uint32 {
	c := crc32.Update(0, castagnoli, []byte{byte(len(key))})
	c = crc32.Update(c, castagnoli, key)
	return crc32.Update(c, castagnoli, v)
}

func sealValue(key, v []byte) []byte {
	out := make([]byte, 0, len(v)+sealSize)
	out = append(out, v...)
	out = binary.BigEndian.AppendUint32(out, stableCRC(key, v))
	return append(out, sealTag)
}

// unsealValue verifies the seal of the stored value v of key and returns the value.
func unsealValue(key, v []byte) ([]byte, error) {
	n := len(v) - sealSize
	if n < 0 || v[len(v)-1] != sealTag {
		return nil, fmt.Errorf("%w: stable store %s: checksum missing or damaged", ErrCorrupt, key)
	}
	if got, want := binary.BigEndian.Uint32(v[n:]), stableCRC(key, v[:n]); got != want {
		return nil, fmt.Errorf("%w: stable store %s: checksum %08x, computed %08x", ErrCorrupt, key, got, want)
	}
	if u64Keys[string(key)] && n != 8 {
		return nil, fmt.Errorf("%w: stable store %s: %d bytes, want 8", ErrCorrupt, key, n)
	}
	return v[:n], nil
}

// sealedLogStore is the raft.LogStore Raft writes its log through: it seals every entry
// it stores and verifies (and strips) the seal of every entry it reads. A read that
// does not verify is an error wrapping ErrCorrupt and is reported to onCorrupt (the
// replica halts: Open passes the FSM's halt).
type sealedLogStore struct {
	raft.LogStore
	onCorrupt func(index uint64, err error)
}

func (s sealedLogStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	err := unsealEntry(l)
	if err == nil && l.Index != index {
		err = fmt.Errorf("%w: the entry stored under index %d has index %d", ErrCorrupt, index, l.Index)
	}
	if err != nil {
		if s.onCorrupt != nil {
			s.onCorrupt(index, err)
		}
		return fmt.Errorf("raft.db log entry %d: %w", index, err)
	}
	return nil
}

func (s sealedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs stores sealed copies of logs: Raft's own entries (also held by its log
// cache and replicated from there) are never changed. Three allocations per batch.
func (s sealedLogStore) StoreLogs(logs []*raft.Log) error {
	copies := make([]raft.Log, len(logs))
	ptrs := make([]*raft.Log, len(logs))
	size := 0
	for _, l := range logs {
		size += len(l.Extensions) + sealSize
	}
	buf := make([]byte, 0, size)
	for i, l := range logs {
		copies[i] = *l
		start := len(buf)
		buf = appendEntrySeal(buf, l)
		copies[i].Extensions = buf[start:len(buf):len(buf)]
		ptrs[i] = &copies[i]
	}
	return s.LogStore.StoreLogs(ptrs)
}

// sealedStableStore is the raft.StableStore Raft keeps its term and vote in: every
// value sealed on write and verified on read. A missing key's error passes unchanged
// (raft matches its text, "not found").
type sealedStableStore struct {
	raft.StableStore
}

func (s sealedStableStore) Set(k, v []byte) error {
	return s.StableStore.Set(k, sealValue(k, v))
}

func (s sealedStableStore) Get(k []byte) ([]byte, error) {
	v, err := s.StableStore.Get(k)
	if err != nil {
		return v, err
	}
	out, err := unsealValue(k, v)
	if err != nil {
		return nil, fmt.Errorf("raft.db: %w", err)
	}
	return out, nil
}

func (s sealedStableStore) SetUint64(k []byte, v uint64) error {
	return s.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

func (s sealedStableStore) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raft.db: %w: stable store %s: %d bytes, want 8", ErrCorrupt, k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// checkStableBucket checks raft.db's stable store (the start check runs it on the file
// opened read-only) with checkStable and reports whether the file is sealed.
func checkStableBucket(db *bolt.DB) (sealed bool, err error) {
	kv := map[string][]byte{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(stableBucket)
		if b == nil {
			return nil // a file raft-boltdb never initialised: nothing stored yet
		}
		return b.ForEach(func(k, v []byte) error {
			kv[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	if err != nil {
		return false, err
	}
	return checkStable(kv)
}

// checkStableValues is checkStable for Repair, which copies the stable store.
func checkStableValues(kv map[string][]byte) error {
	_, err := checkStable(kv)
	return err
}

// checkStable checks the stable store's keys and values: only the keys Raft and the
// marker use, and, in a sealed file, every value's seal; in a file not sealed yet,
// values that are sealed must verify and the term values are 8 bytes. It reports
// whether the file is sealed. Problems are a *CorruptFileError (index 0) naming the key.
func checkStable(kv map[string][]byte) (sealed bool, err error) {
	bad := func(format string, args ...any) error {
		return &CorruptFileError{File: RaftFile, Err: fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))}
	}
	if m, ok := kv[string(sealMarkerKey)]; ok {
		v, err := unsealValue(sealMarkerKey, m)
		if err != nil {
			return false, bad("the seal marker: %v", err)
		}
		if !bytes.Equal(v, sealMarkerValue) {
			return false, bad("the seal marker is version %x; this binary knows %x", v, sealMarkerValue)
		}
		sealed = true
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key, the same on every run
	for _, k := range keys {
		key, v := []byte(k), kv[k]
		switch {
		case !stableKeys[k]:
			return false, bad("the stable store holds an unknown key %q (a damaged key name?)", k)
		case k == string(sealMarkerKey):
		case sealed || looksSealed(key, v):
			if _, err := unsealValue(key, v); err != nil {
				return false, bad("%v", err)
			}
		case u64Keys[k] && len(v) != 8:
			return false, bad("stable store %s: %d bytes, want 8", k, len(v))
		}
	}
	return sealed, nil
}

// looksSealed reports whether a value of a file not sealed yet was sealed (by an
// upgrade a crash interrupted): a term of 13 bytes, or any value ending in a seal
// that verifies.
func looksSealed(k, v []byte) bool {
	if u64Keys[string(k)] {
		return len(v) == 8+sealSize
	}
	_, err := unsealValue(k, v)
	return err == nil
}

// checkEntrySeal checks the seal of an entry read by the start check: required in a
// sealed file; in a file not sealed yet, an entry with extensions must be sealed and
// verify (baton never wrote extensions of its own before sealing).
func checkEntrySeal(l *raft.Log, sealed bool) error {
	if !sealed && len(l.Extensions) == 0 {
		return nil
	}
	return unsealEntry(l)
}

// rawStore is what sealRaftFile needs of raft-boltdb's store.
type rawStore interface {
	raft.LogStore
	raft.StableStore
}

// sealRaftFile seals a raft.db written before sealing existed (the start check has
// accepted it): every bare entry, in one write, then every bare stable value, then the
// marker. A fresh file just gets the marker. Idempotent: a crash part way leaves a
// file the start check accepts and the next start finishes the job.
func sealRaftFile(s rawStore, logger *slog.Logger) error {
	if _, err := s.Get(sealMarkerKey); err == nil {
		return nil
	}
	first, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("seal raft.db: %w", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		return fmt.Errorf("seal raft.db: %w", err)
	}
	var bare []*raft.Log
	if first > 0 {
		for i := first; i <= last; i++ {
			l := new(raft.Log)
			if err := s.GetLog(i, l); errors.Is(err, raft.ErrLogNotFound) {
				continue // a gap under the snapshot (the start check allowed it)
			} else if err != nil {
				return fmt.Errorf("seal raft.db: entry %d: %w", i, err)
			}
			if len(l.Extensions) == 0 {
				bare = append(bare, l)
			}
		}
	}
	if len(bare) > 0 {
		if err := (sealedLogStore{LogStore: s}).StoreLogs(bare); err != nil {
			return fmt.Errorf("seal raft.db entries: %w", err)
		}
	}
	values := 0
	for k := range stableKeys {
		key := []byte(k)
		if bytes.Equal(key, sealMarkerKey) {
			continue
		}
		v, err := s.Get(key)
		if err != nil || looksSealed(key, v) {
			continue // not there (raft's "not found"), or sealed already
		}
		if err := (sealedStableStore{s}).Set(key, v); err != nil {
			return fmt.Errorf("seal raft.db stable store %s: %w", k, err)
		}
		values++
	}
	if err := (sealedStableStore{s}).Set(sealMarkerKey, sealMarkerValue); err != nil {
		return fmt.Errorf("seal raft.db: write the marker: %w", err)
	}
	if len(bare) > 0 || values > 0 {
		logger.Warn("raft.db sealed: every Raft log entry (index, term, type, data) and Raft's term and vote now carry a checksum verified on every read; "+
			"they had none before, so a bit flipped in them before now cannot be found: if this device's disk is suspect, run baton repair",
			"component", "intentlog", "entries", len(bare), "stable_values", values)
	}
	return nil
}
