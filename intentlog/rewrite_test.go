package intentlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// Issue 38 item 3: Raft never deletes a committed entry, unless a voter's disk went
// back in time and helped elect a leader without it. Then the leader's history
// differs from what this replica applied: the guard refuses to delete an applied
// entry, keeps the replica's history, and halts it with an error that names the
// commits the chain key signed twice. Compaction (a prefix) and the truncation of
// entries not yet applied pass as before.
func TestRewriteGuardRefusesToDeleteAppliedEntries(t *testing.T) {
	h := newHarness(t)
	for range 5 {
		h.applyRaw([]byte{0xff}) // malformed, rejected: applied all the same
	}
	store := raft.NewInmemStore()
	for i := uint64(1); i <= 8; i++ {
		l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{0xff}}
		if i == 4 {
			b, err := Encode(CommitEntry{Raw: testCommit{CommitInfo: CommitInfo{Seq: 7, Epoch: 2, Signer: "a"}, Sig: "ok"}.encode()})
			if err != nil {
				t.Fatal(err)
			}
			l.Data = b
		}
		if err := store.StoreLog(l); err != nil {
			t.Fatal(err)
		}
	}
	g := rewriteGuard{LogStore: store, fsm: h.f, verify: testVerify}

	if err := g.DeleteRange(7, 8); err != nil { // not applied yet: a follower's uncommitted suffix
		t.Fatalf("truncating entries not applied: %v", err)
	}
	if err := g.DeleteRange(1, 2); err != nil { // compaction: a prefix, trailing entries kept
		t.Fatalf("compaction: %v", err)
	}
	if h.f.Fault() != nil {
		t.Fatalf("fault raised by a harmless delete: %v", h.f.Fault())
	}
	err := g.DeleteRange(4, 6)
	var rw *RewriteError
	if !errors.As(err, &rw) || !errors.Is(err, ErrRewrite) {
		t.Fatalf("deleting applied entries 4-5: %v, want a RewriteError", err)
	}
	if len(rw.Seqs) != 1 || rw.Seqs[0] != 7 || rw.Applied != 5 {
		t.Fatalf("RewriteError %+v, want seq 7 named and applied 5", rw)
	}
	var l raft.Log
	if err := store.GetLog(4, &l); err != nil {
		t.Fatalf("the applied entry was deleted: %v", err)
	}
	fault := h.f.Fault()
	var fe *FaultError
	if !errors.As(fault, &fe) || !fe.Halted || !strings.Contains(fault.Error(), "commit seqs 7") {
		t.Fatalf("fault %v: want the replica halted with the seqs named", fault)
	}
}
