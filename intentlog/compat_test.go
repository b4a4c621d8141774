package intentlog

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// v1Log reads testdata/v1/log.txt: the Raft log an older build (codec and layout 1)
// wrote for the sequence in testdata/v1/generator_test.go.txt.
func v1Log(t testing.TB) []*raft.Log {
	t.Helper()
	f, err := os.Open("testdata/v1/log.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var logs []*raft.Log
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var idx uint64
		var typ int
		var hx string
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %s", &idx, &typ, &hx); err != nil {
			t.Fatalf("log.txt: %q: %v", sc.Text(), err)
		}
		data, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogType(typ), Data: data})
	}
	return logs
}

func v1Snapshot(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/v1/snapshot.hex")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := hex.DecodeString(strings.Join(strings.Fields(string(b)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Existing data keeps working: a snapshot written by an older build restores
// (converted to the current layout) to exactly the state that replaying the older
// build's log from the start gives, and that state is what the older build had.
func TestV1SnapshotConvertsToReplayedState(t *testing.T) {
	logs := v1Log(t)
	replayed := newHarness(t)
	replayed.f.ApplyBatch(logs)
	replayed.idx = logs[len(logs)-1].Index

	restored := newHarness(t)
	if err := restored.f.Restore(io.NopCloser(bytes.NewReader(v1Snapshot(t)))); err != nil {
		t.Fatalf("restore v1 snapshot: %v", err)
	}
	if !bytes.Equal(replayed.dump(), restored.dump()) {
		t.Fatal("converted v1 snapshot differs from the replayed v1 log")
	}
	v := restored.f.View()
	// What the older build reported (testdata/v1/README), plus the revision.
	if v.AppliedIndex != 16 || v.Lease != (Lease{Holder: "a", Epoch: 3, TS: 20000, TTL: 15000, Rev: 14}) ||
		v.Head.Seq != 3 || v.Head.Epoch != 3 || v.Pending != 2 || v.PendingBytes != 13 {
		t.Fatalf("view %+v", v)
	}
	l := &Log{fsm: restored.f}
	if val, ok, _ := l.Record("c/.."); !ok || string(val) != "dots ok in v1" {
		t.Fatalf("record accepted under the v1 rules: %q %v", val, ok)
	}
	rej := restored.f.Rejections()
	if rej[ReasonEpochMismatch] != 1 || rej[ReasonBadPath] != 1 || rej[ReasonMalformed] != 1 {
		t.Fatalf("rejections %v", rej)
	}
	// The converted state carries on under the current rules.
	restored.idx = v.AppliedIndex
	restored.mustAccept(RenewEntry{Holder: "a", Epoch: 3, PrevRev: 14, TS: 21000})
}

// A state.db of an older layout is set aside (never overwriting an earlier one) and the
// FSM starts empty, to be rebuilt from the snapshot and the log.
func TestOldLayoutStateSetAside(t *testing.T) {
	dir := t.TempDir()
	writeV1State := func() {
		db, err := bolt.Open(dir+"/"+StateFile, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bMeta)
			if err != nil {
				return err
			}
			return b.Put(keyState, []byte{1, 7, 0, 0, 0, 0, 0}) // layout 1 header
		})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if err := markClean(dir + "/" + StateFile); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{".old-layout", ".old-layout.1"} {
		writeV1State()
		f, err := NewFSM(dir, testVerify)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if v := f.View(); v.AppliedIndex != 0 {
			t.Fatalf("old-layout state not set aside: %+v", v)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir + "/" + StateFile + want); err != nil {
			t.Fatalf("set-aside file %s: %v", want, err)
		}
		os.Remove(dir + "/" + StateFile)
	}
	// A newer layout (a downgrade) is refused, not destroyed.
	db, _ := bolt.Open(dir+"/"+StateFile, 0o600, nil)
	_ = db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucketIfNotExists(bMeta)
		return b.Put(keyState, []byte{layoutVersion + 1})
	})
	db.Close()
	_ = markClean(dir + "/" + StateFile)
	if _, err := NewFSM(dir, testVerify); err == nil || !strings.Contains(err.Error(), "downgrade") {
		t.Fatalf("newer layout: %v", err)
	}
	if _, err := os.Stat(dir + "/" + StateFile); err != nil {
		t.Fatal("newer-layout state removed")
	}
}

func TestSetAsideNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/f"
	var names []string
	for i := 0; i < 3; i++ {
		if err := os.WriteFile(p, []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		name, err := setAside(p, "unclean")
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for i, n := range names {
		b, err := os.ReadFile(n)
		if err != nil || len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("%s: %v %v", n, b, err)
		}
	}
	if names[0] != p+".unclean" || names[2] != p+".unclean.2" {
		t.Fatalf("names %v", names)
	}
}
