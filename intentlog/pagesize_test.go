package intentlog

import (
	"bytes"
	"io"
	"testing"
)

// A state.db this build creates, new or restored from a snapshot, has statePageSize
// pages: the apply of a commit whose intents land in leaves they do not share costs
// less with small pages (BenchmarkApplyCarried64Clients).
func TestStateFilePageSize(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.commitOps(5000, put("c1", "c/1", "one"), put("c2", "c/2", "two"))
	if got := h.f.db.Info().PageSize; got != statePageSize {
		t.Fatalf("new state.db: page size %d, want %d", got, statePageSize)
	}
	r := newHarness(t)
	if err := r.f.Restore(io.NopCloser(bytes.NewReader(h.dump()))); err != nil {
		t.Fatal(err)
	}
	if got := r.f.db.Info().PageSize; got != statePageSize {
		t.Fatalf("restored state.db: page size %d, want %d", got, statePageSize)
	}
	if !bytes.Equal(r.dump(), h.dump()) {
		t.Fatal("restored state differs")
	}
}
