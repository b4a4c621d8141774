package intentlog

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// flipStored flips one bit of the stored value at bucket/key, as a bad disk would.
func flipStored(t *testing.T, f *FSM, bucket, key []byte, at int) {
	t.Helper()
	err := f.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		v := append([]byte{}, b.Get(key)...)
		if len(v) == 0 {
			t.Fatalf("no value at %s/%q", bucket, key)
		}
		v[at%len(v)] ^= 0x04
		return b.Put(key, v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, says ...string) {
	t.Helper()
	var fe *FaultError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &fe) || fe.File != StateFile {
		t.Fatalf("got %v, want a state.db ErrCorrupt fault", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%q does not say %q", err, s)
		}
	}
}

// DESIGN: what baton writes is checksummed and verified on read. A flipped bit in a
// record is an error naming state.db and the path, never the wrong bytes, and it halts
// the FSM (the state cannot be trusted any more).
func TestRecordVerifiedOnRead(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	h.commitPending(2)
	h.mustAccept(one(put("i3", "c/3", "value three")))
	h.commitPending(1)
	l := &Log{fsm: h.f}
	flipStored(t, h.f, bRecords, []byte("c/3"), 3)
	v, ok, err := l.Record("c/3")
	if v != nil || ok {
		t.Fatalf("corrupt record served: %q", v)
	}
	wantCorrupt(t, err, "state.db", `records/"c/3"`)
	if _, err := l.Records("c/", 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Records over a corrupt value: %v", err)
	}
	if !errors.Is(h.f.Fault(), ErrCorrupt) || h.f.halted() == nil {
		t.Fatal("a corrupt read did not halt the FSM")
	}
}

func TestCommitVerifiedOnRead(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	_, raw := h.commitPending(2)
	l := &Log{fsm: h.f}
	if got, err := l.Commit(1); err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("commit 1 = %x, %v", got, err)
	}
	for _, at := range []int{0, 40, 70} { // in the stored hash, and in the raw bytes
		h2 := newHarness(t)
		heldWithPending(h2)
		h2.commitPending(2)
		flipStored(t, h2.f, bChain, u64key(1), at)
		got, err := (&Log{fsm: h2.f}).Commit(1)
		if got != nil {
			t.Fatalf("corrupt commit served: %x", got)
		}
		wantCorrupt(t, err, "state.db", "chain/1")
	}
}

// Every other stored value is checked too, and so is the meta record.
func TestStoredValuesVerified(t *testing.T) {
	read := map[string]func(l *Log) error{
		"pending": func(l *Log) error { _, err := l.Pending(0, 0); return err },
		"history": func(l *Log) error { _, err := l.LeaseHistory(); return err },
		"members": func(l *Log) error { _, err := l.Members(); return err },
		"dedupe":  func(l *Log) error { _, _, err := l.IntentStatus("i2"); return err },
	}
	keys := map[string][2][]byte{
		"pending": {bPending, u64key(1)},
		"history": {bHistory, u64key(0)},
		"members": {bMembers, []byte("a")},
		"dedupe":  {bDedupe, []byte("i2")},
	}
	for name, fn := range read {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.members("a")
			heldWithPending(h)
			k := keys[name]
			flipStored(t, h.f, k[0], k[1], 0)
			wantCorrupt(t, fn(&Log{fsm: h.f}), "state.db", string(k[0]))
		})
	}
}

// A state file whose meta record does not verify is set aside (under a unique name) and
// rebuilt, not opened.
func TestCorruptMetaAtOpenSetAside(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	held(h)
	flipStored(t, f, bMeta, keyState, 5)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = NewFSM(dir, testVerify)
	if err != nil {
		t.Fatalf("open over a corrupt meta: %v", err)
	}
	defer f.Close()
	if f.View().AppliedIndex != 0 {
		t.Fatal("a corrupt state was opened")
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile+".corrupt")); err != nil {
		t.Fatalf("corrupt state not set aside: %v", err)
	}
}

// A snapshot is never taken of corrupt state: the dump verifies what it reads.
func TestSnapshotOfCorruptStateFails(t *testing.T) {
	h := newHarness(t)
	heldWithPending(h)
	h.commitPending(1)
	flipStored(t, h.f, bRecords, []byte("c/1"), 0)
	var b bytes.Buffer
	wantCorrupt(t, h.f.Dump(&b), "records")
}

// A snapshot whose values do not verify is refused even when its framing and overall
// checksum are intact (a replica that dumped corrupt state must not spread it).
func TestRestoreVerifiesValues(t *testing.T) {
	src := newHarness(t)
	heldWithPending(src)
	src.commitPending(2)
	good := src.dump()
	// Re-frame the dump with one record value changed and a recomputed checksum.
	bad := reframe(t, good, func(bucket, k, v []byte) []byte {
		if string(bucket) == string(bRecords) {
			v = append([]byte{}, v...)
			v[0] ^= 1
		}
		return v
	})
	dst := newHarness(t)
	dst.mustAccept(one(put("keep", "k/k", "me")))
	keep := dst.dump()
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("restore of a snapshot with a corrupt value: %v", err)
	}
	if !bytes.Equal(keep, dst.dump()) {
		t.Fatal("failed restore changed the state")
	}
}

// reframe rewrites a dump's values through fn and recomputes its checksum.
func reframe(t *testing.T, dump []byte, fn func(bucket, k, v []byte) []byte) []byte {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(dump[:len(dump)-32]))
	var out bytes.Buffer
	head := make([]byte, len(snapMagic)+1)
	io.ReadFull(r, head)
	out.Write(head)
	uv := func() uint64 {
		v, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(binary.AppendUvarint(nil, v))
		return v
	}
	raw := func(n uint64) []byte { b := make([]byte, n); io.ReadFull(r, b); return b }
	uv() // applied
	for range bucketsOf(layoutVersion) {
		name := raw(uv())
		out.Write(name)
		for {
			m, _ := r.ReadByte()
			out.WriteByte(m)
			if m == 0 {
				break
			}
			k := raw(uv())
			out.Write(k)
			vn, _ := binary.ReadUvarint(r)
			v := fn(name, k, raw(vn))
			out.Write(binary.AppendUvarint(nil, uint64(len(v))))
			out.Write(v)
		}
	}
	sum := sha256.Sum256(out.Bytes())
	out.Write(sum[:])
	return out.Bytes()
}

// A failed restart must not overwrite what an earlier one set aside: each unclean file
// gets its own name (this used to replace state.db.unclean with an empty file).
func TestFailedRestartsKeepEverySetAsideFile(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	h.mustAccept(one(put("a", "c/a", "precious")))
	_ = f.db.Close() // crash: not closed cleanly
	for i := 0; i < 3; i++ {
		g, err := NewFSM(dir, testVerify) // a restart that dies before Close
		if err != nil {
			t.Fatal(err)
		}
		_ = g.db.Close()
	}
	db, err := bolt.Open(filepath.Join(dir, StateFile+".unclean"), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil || m.Applied != 1 {
			t.Fatalf("the first set-aside file lost its state: %+v %v", m, err)
		}
		return nil
	})
	for _, n := range []string{".unclean.1", ".unclean.2"} {
		if _, err := os.Stat(filepath.Join(dir, StateFile+n)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
}
