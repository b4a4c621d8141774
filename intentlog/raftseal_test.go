package intentlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// editEntry rewrites one stored Raft log entry of the stopped device at dir through
// raft-boltdb itself, bypassing baton: what a flipped bit in that field of the stored
// entry amounts to (the stored checksum, if any, is kept as it was).
func editEntry(t *testing.T, dir string, pick func(s *raftboltdb.BoltStore) uint64, edit func(*raft.Log)) uint64 {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, RaftFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	i := pick(s)
	var l raft.Log
	if err := s.GetLog(i, &l); err != nil {
		t.Fatal(err)
	}
	edit(&l)
	if err := s.StoreLog(&l); err != nil {
		t.Fatal(err)
	}
	return i
}

func lastEntry(s *raftboltdb.BoltStore) uint64 {
	last, _ := s.LastIndex()
	return last
}

// firstConfiguration picks the first configuration entry.
func firstConfiguration(s *raftboltdb.BoltStore) uint64 {
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	for i := first; i <= last; i++ {
		var l raft.Log
		if s.GetLog(i, &l) == nil && l.Type == raft.LogConfiguration {
			return i
		}
	}
	panic("no configuration entry")
}

// Issue 20 item 1: every field of a stored Raft entry that Raft trusts is covered. A
// flipped bit in the term of the last entry let a device win an election with a log
// it does not have and truncate committed entries elsewhere; in its index, type or a
// configuration's voter flag it changes what Raft believes just as silently. Open
// must refuse each, naming raft.db, the entry and the way out.
func TestOpenRefusesFlippedEntryHeader(t *testing.T) {
	cases := []struct {
		name string
		pick func(s *raftboltdb.BoltStore) uint64
		edit func(*raft.Log)
	}{
		{"term of the last entry", lastEntry,
			func(l *raft.Log) { l.Term ^= 1 << 6 }},
		{"low bit of the term", lastEntry,
			func(l *raft.Log) { l.Term ^= 1 }},
		{"type", lastEntry,
			func(l *raft.Log) { l.Type ^= 1 }},
		{"extensions", lastEntry,
			func(l *raft.Log) { l.Extensions = append(l.Extensions, 1) }},
		{"voter flag of a configuration", firstConfiguration, func(l *raft.Log) {
			c := raft.DecodeConfiguration(l.Data)
			c.Servers[0].Suffrage = raft.Nonvoter
			l.Data = raft.EncodeConfiguration(c)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := oneNodeWithMarker(t)
			i := editEntry(t, dir, tc.pick, tc.edit)
			_, err := openDir(t, dir, "n0")
			wantCorruptFile(t, err, i)
			if !strings.Contains(err.Error(), "checksum") {
				t.Fatalf("%q does not say checksum", err)
			}
		})
	}
}

// flipStableValue flips one bit of the last byte of the stable store's 8-byte value
// at key, in the file (bbolt keeps a key and its value side by side in a leaf page).
func flipStableValue(t *testing.T, dir, key string) {
	t.Helper()
	p := filepath.Join(dir, RaftFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(key))
		if j < 0 {
			break
		}
		i += j + len(key)
		if i+8 <= len(b) {
			b[i+7] ^= 0x40
			n++
		}
	}
	if n == 0 {
		t.Fatalf("%s not found in %s", key, p)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Raft's stable store (its current term and its vote) is covered too: a flipped term
// or vote lets a device vote twice in a term or ignore a leader.
func TestOpenRefusesFlippedStableStore(t *testing.T) {
	for _, key := range []string{"CurrentTerm", "LastVoteTerm"} {
		t.Run(key, func(t *testing.T) {
			dir, _ := oneNodeWithMarker(t)
			flipStableValue(t, dir, key)
			_, err := openDir(t, dir, "n0")
			wantCorruptFile(t, err, 0)
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("%q does not name %s", err, key)
			}
		})
	}
}

// unsealFile turns the raft.db of the stopped device at dir into one written before
// sealing existed: bare entries, bare stable values, no marker.
func unsealFile(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, RaftFile)
	s, err := raftboltdb.New(raftboltdb.Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if err := unsealEntry(&l); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLog(&l); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(stableBucket)
		kv := map[string][]byte{}
		_ = b.ForEach(func(k, v []byte) error { kv[string(k)] = append([]byte(nil), v...); return nil })
		for k, v := range kv {
			if k == string(sealMarkerKey) {
				if err := b.Delete([]byte(k)); err != nil {
					return err
				}
				continue
			}
			bare, err := unsealValue([]byte(k), v)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(k), bare); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sealedNow asserts raft.db at dir is sealed: the marker, every entry and value.
func sealedNow(t *testing.T, dir string) {
	t.Helper()
	if err := checkRaftFile(dir); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, RaftFile), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := checkStableBucket(db)
	db.Close()
	if err != nil || !sealed {
		t.Fatalf("sealed %v, %v", sealed, err)
	}
}

// A raft.db from before sealing (no marker, bare entries and values) passes the old
// checks and is sealed once at Open; an upgrade interrupted part way (entries sealed,
// no marker) is finished at the next Open. After it, a flipped term is refused.
func TestOpenSealsOldRaftFile(t *testing.T) {
	dir, index := oneNodeWithMarker(t)
	unsealFile(t, dir)
	if err := checkRaftFile(dir); err != nil {
		t.Fatalf("the start check refuses an old raft.db: %v", err)
	}
	l, err := openDir(t, dir, "n0")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a leader", func() bool { return l.Raft().State() == raft.Leader })
	res, err := l.Propose(context.Background(), one(put("after-upgrade", "c/4", "v")))
	if err != nil || res.Index <= index {
		t.Fatalf("propose after the upgrade: %+v, %v", res, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sealedNow(t, dir)

	// Interrupted: the entries were sealed, the values and the marker not yet.
	unsealFile(t, dir)
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, RaftFile)})
	if err != nil {
		t.Fatal(err)
	}
	var bare []*raft.Log
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := s.GetLog(i, l); err != nil {
			t.Fatal(err)
		}
		bare = append(bare, l)
	}
	if err := (sealedLogStore{LogStore: s}).StoreLogs(bare); err != nil {
		t.Fatal(err)
	}
	s.Close()
	l, err = openDir(t, dir, "n0")
	if err != nil {
		t.Fatalf("Open after an interrupted upgrade: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sealedNow(t, dir)
	i := editEntry(t, dir, lastEntry, func(l *raft.Log) { l.Term ^= 1 << 6 })
	_, err = openDir(t, dir, "n0")
	wantCorruptFile(t, err, i)
}

// A damaged key name in the stable store (the marker's included) is refused: without
// it the file would pass as one from before sealing.
func TestOpenRefusesDamagedStableKey(t *testing.T) {
	for _, key := range []string{"CurrentTerm", string(sealMarkerKey)} {
		t.Run(key, func(t *testing.T) {
			dir, _ := oneNodeWithMarker(t)
			flipInFile(t, filepath.Join(dir, RaftFile), []byte(key))
			_, err := openDir(t, dir, "n0")
			wantCorruptFile(t, err, 0)
			if !strings.Contains(err.Error(), "unknown key") {
				t.Fatalf("%q does not say unknown key", err)
			}
		})
	}
}

// The sealed stores hand Raft exactly what it stored: extensions, terms, the vote.
func TestSealedStoresRoundTrip(t *testing.T) {
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), RaftFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var corrupt []uint64
	ls := sealedLogStore{LogStore: s, onCorrupt: func(i uint64, _ error) { corrupt = append(corrupt, i) }}
	in := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("c")},
		{Index: 2, Term: 3, Type: raft.LogCommand, Data: []byte("d"), Extensions: []byte("ext")}}
	if err := ls.StoreLogs(in); err != nil {
		t.Fatal(err)
	}
	if in[1].Extensions == nil || string(in[1].Extensions) != "ext" || in[0].Extensions != nil {
		t.Fatal("StoreLogs changed Raft's entries")
	}
	for _, want := range in {
		var got raft.Log
		if err := ls.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		if got.Term != want.Term || got.Type != want.Type || string(got.Data) != string(want.Data) || !bytes.Equal(got.Extensions, want.Extensions) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	st := sealedStableStore{s}
	if err := st.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := st.Set([]byte("LastVoteCand"), []byte("n1")); err != nil {
		t.Fatal(err)
	}
	if v, err := st.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm %d, %v", v, err)
	}
	if v, err := st.Get([]byte("LastVoteCand")); err != nil || string(v) != "n1" {
		t.Fatalf("LastVoteCand %q, %v", v, err)
	}
	if _, err := st.GetUint64([]byte("LastVoteTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("a missing key: %v (raft matches the text %q)", err, "not found")
	}
	// A flipped term read at run time: an error, reported as corruption.
	var raw raft.Log
	_ = s.GetLog(2, &raw)
	raw.Term ^= 1
	_ = s.StoreLog(&raw)
	var got raft.Log
	if err := ls.GetLog(2, &got); !errors.Is(err, ErrCorrupt) || len(corrupt) != 1 || corrupt[0] != 2 {
		t.Fatalf("GetLog of a flipped term: %v, reported %v", err, corrupt)
	}
}

// entryCRC's header loop is CRC-32C over the big-endian header bytes.
func TestEntryCRCMatchesCRC32C(t *testing.T) {
	l := &raft.Log{Index: 0x0102030405060708, Term: 0x1112131415161718, Type: raft.LogConfiguration, Data: []byte("data")}
	h := binary.BigEndian.AppendUint64(nil, l.Index)
	h = binary.BigEndian.AppendUint64(h, l.Term)
	h = append(h, byte(l.Type))
	h = binary.BigEndian.AppendUint32(h, uint32(len(l.Data)))
	want := crc32c(append(append(h, l.Data...), "ext"...))
	if got := entryCRC(l, []byte("ext")); got != want {
		t.Fatalf("entryCRC %08x, want %08x", got, want)
	}
}

// Repair keeps the term and vote it copies: a damaged one is refused (the device could
// vote twice in a term), never copied into the repaired raft.db.
func TestRepairRefusesFlippedStableStore(t *testing.T) {
	dir, _ := oneNodeWithMarker(t)
	flipStableValue(t, dir, "CurrentTerm")
	if err := Repair(dir); err == nil || !strings.Contains(err.Error(), "vote twice") || !strings.Contains(err.Error(), "CurrentTerm") {
		t.Fatalf("Repair with a flipped term: %v", err)
	}
}

// The fork of issue 20 item 1 at the cluster level: a follower F falls behind (down
// while b-1..b-10 commit on the leader and G), the leader dies, and F's raft.db
// comes back with its last entry's term flipped 2 -> 66. F's log lacks ten committed
// entries; G has them. Raft must never let F lead: F's start is refused. (Before
// the seals F started, won the election with its "greater" last term, and G
// truncated the committed entries.)
func TestFlippedTermNeverLeads(t *testing.T) {
	c := newCluster(t, 3, nil)
	for i := range 3 {
		c.propose(one(put(fmt.Sprintf("a-%d", i+1), "c/a", "v")))
	}
	ld := c.leader()
	var f, g int
	for i, nd := range c.nodes {
		if nd != ld {
			f, g = i, i
			break
		}
	}
	for i, nd := range c.nodes {
		if nd != ld && i != f {
			g = i
		}
	}
	c.stop(f)
	var last Result
	for i := range 10 {
		last = c.propose(one(put(fmt.Sprintf("b-%d", i+1), "c/b", "v")))
	}
	waitFor(t, "G applied b-10", func() bool { return c.nodes[g].log.View().AppliedIndex >= last.Index })
	for i, nd := range c.nodes {
		if nd == ld {
			c.stop(i)
		}
	}
	fd := c.nodes[f]
	editEntry(t, fd.dir, lastEntry, func(l *raft.Log) { l.Term |= 1 << 6 })

	// Start F beside G, as c.start does, but keep the error.
	_, fd.trans = raft.NewInmemTransport(raft.ServerAddress(fd.id))
	gd := c.nodes[g]
	fd.trans.Connect(raft.ServerAddress(gd.id), gd.trans)
	gd.trans.Connect(raft.ServerAddress(fd.id), fd.trans)
	l, err := Open(Config{Dir: fd.dir, LocalID: fd.id, Verify: testVerify, Logger: quietLogger(),
		Raft: fastRaft, SnapshotThreshold: 1 << 30, SnapshotInterval: time.Hour}, fd.trans)
	if err == nil {
		fd.log = l
		waitFor(t, "a leader", func() bool {
			return l.Raft().State() == raft.Leader || gd.log.Raft().State() == raft.Leader
		})
		t.Fatalf("F started on a flipped term: leader F=%v (its last index %d, committed up to %d)",
			l.Raft().State() == raft.Leader, l.Raft().LastIndex(), last.Index)
	}
	wantCorruptFile(t, err, 0)
}
