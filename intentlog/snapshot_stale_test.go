package intentlog

import (
	"bytes"
	"io"
	"testing"
)

// A snapshot at or below the applied index is not restored (the simulator's seed
// 401657: a duplicated InstallSnapshot of index 774 reached a follower that had
// applied up to 945 and rolled its state back, its lease epoch from 3 to 2). The state
// is kept, and replaying the entries after the snapshot applies nothing twice. A newer
// snapshot is still restored.
func TestRestoreOfAnOlderSnapshotKeepsTheState(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.mustAccept(one(put("a", "c/1", "v")))
	h.signAll()
	old := h.dump()
	oldIndex := h.f.View().AppliedIndex
	h.mustAccept(ClaimEntry{Holder: "b", Epoch: 2, PrevRev: h.rev(), TS: h.lastStamp() + 1000, TTL: 15_000, Force: true, Reason: "steal"})
	h.mustAccept(one(put("b", "c/2", "v")))
	before := h.dump()
	v := h.f.View()
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if got := h.f.View(); got.AppliedIndex != v.AppliedIndex || got.Lease != v.Lease || !bytes.Equal(h.dump(), before) {
		t.Fatalf("restoring the snapshot of index %d rolled the state back: applied %d -> %d, lease %+v -> %+v",
			oldIndex, v.AppliedIndex, got.AppliedIndex, v.Lease, got.Lease)
	}
	if h.f.staleRestores.Load() != 1 || h.f.restores.Load() != 0 {
		t.Fatalf("stale %d, restored %d", h.f.staleRestores.Load(), h.f.restores.Load())
	}
	// Same index: kept too. A newer snapshot (another replica's, further on) is restored.
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(before))); err != nil || h.f.restores.Load() != 0 {
		t.Fatalf("same index: %v, restored %d", err, h.f.restores.Load())
	}
	c := newHarness(t)
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(old))); err != nil || c.f.View().AppliedIndex != oldIndex {
		t.Fatalf("restore into an empty state: %v, applied %d", err, c.f.View().AppliedIndex)
	}
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(before))); err != nil || c.f.View().AppliedIndex != v.AppliedIndex || c.f.restores.Load() != 2 {
		t.Fatalf("restore of a newer snapshot: %v, applied %d", err, c.f.View().AppliedIndex)
	}
}
