package intentlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/internal/knobs"
)

// refDigest is the rule, written out: SHA-256(prev | index | type | data | accepted |
// reason).
func refDigest(prev [32]byte, l *raft.Log, accepted bool, reason Reason) [32]byte {
	var b []byte
	b = append(b, prev[:]...)
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = append(b, byte(l.Type))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	if accepted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(reason)))
	b = append(b, reason...)
	return sha256.Sum256(b)
}

func TestDigestRule(t *testing.T) {
	h := newHarness(t)
	var d [32]byte
	cfg := &raft.Log{Index: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(raft.Configuration{
		Servers: []raft.Server{{ID: "a", Address: "a"}}})}
	h.f.ApplyBatch([]*raft.Log{cfg})
	h.idx = 1
	if i, got := h.f.Digest(); i != 0 || got != ([32]byte{}) {
		t.Fatalf("digest before the first version-2 command: %d %x", i, got)
	}
	steps := []Entry{
		ClaimEntry{Holder: "a", Epoch: 1, TS: 1, TTL: 10}, // accepted: starts the digest
		RenewEntry{Holder: "z", Epoch: 1, TS: 2},          // rejected: not_holder
		one(put("i", "c/1", "v")),                         // accepted
	}
	for _, e := range steps {
		res := h.apply(e)
		l := &raft.Log{Index: h.idx, Type: raft.LogCommand, Data: mustEncode(t, e)}
		d = refDigest(d, l, res.Accepted, res.Reason)
		if i, got := h.f.Digest(); i != h.idx || got != d {
			t.Fatalf("after %T: digest %d %x, want %d %x", e, i, got, h.idx, d)
		}
	}
	// Configuration entries and malformed ones count once it started.
	h.members("a", "b")
	d = refDigest(d, &raft.Log{Index: h.idx, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(raft.Configuration{
		Servers: []raft.Server{{ID: "a", Address: "a"}, {ID: "b", Address: "b"}}})}, true, "")
	res := h.applyRaw([]byte{0x99})
	d = refDigest(d, &raft.Log{Index: h.idx, Type: raft.LogCommand, Data: []byte{0x99}}, false, res.Reason)
	if i, got := h.f.Digest(); i != h.idx || got != d {
		t.Fatalf("digest %d %x, want %d %x", i, got, h.idx, d)
	}
	// An entry already applied (a replay after a restart) does not count again.
	h.f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, steps[0])})
	if _, got := h.f.Digest(); got != d {
		t.Fatal("a skipped entry changed the digest")
	}
}

// Two replicas whose applies disagree get different digests at once: what the
// cross-replica comparison is for.
func TestDigestTellsDivergentReplicas(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	b.f.knobs = knobs.Intentlog{EpochOnlyClaim: true}
	for _, h := range []*harness{a, b} {
		held(h)
		h.mustAccept(RenewEntry{Holder: "a", Epoch: 1, PrevRev: 1, TS: 200})
	}
	e := ClaimEntry{Holder: "b", Epoch: 2, PrevRev: 1, TS: 300, TTL: 10}
	a.apply(e)
	b.apply(e)
	_, da := a.f.Digest()
	_, db := b.f.Digest()
	if da == db {
		t.Fatal("replicas that applied an entry differently have the same digest")
	}
}

// Checkpoints: the digest at the first applied index of every 1024-block, the last 64,
// in the state and in snapshots.
func TestDigestCheckpoints(t *testing.T) {
	h := newHarness(t)
	h.f.digestEvery, h.f.digestKeep = 8, 3
	held(h)
	var at = map[uint64][32]byte{}
	for i := 0; i < 40; i++ {
		if i%5 == 4 {
			h.idx += 2 // indexes the FSM never sees (Raft barriers, no-ops)
		}
		h.mustAccept(one(put(string(rune('A'+i)), "c/1", "v")))
		idx, d := h.f.Digest()
		at[idx] = d
	}
	l := &Log{fsm: h.f}
	cps := l.DigestCheckpoints()
	if len(cps) != 3 {
		t.Fatalf("checkpoints %v, want the last 3", cps)
	}
	for i, c := range cps {
		if i > 0 && c/8 <= cps[i-1]/8 {
			t.Fatalf("checkpoints %v: one per block of 8", cps)
		}
		got, ok := l.DigestAt(c)
		if !ok || got != at[c] {
			t.Fatalf("DigestAt(%d) = %x %v, want %x", c, got, ok, at[c])
		}
	}
	if _, ok := l.DigestAt(cps[0] + 1); ok {
		t.Fatal("DigestAt of an index that is no checkpoint")
	}
	// Restored replicas keep them.
	c := newHarness(t)
	if err := c.f.Restore(io.NopCloser(bytes.NewReader(h.dump()))); err != nil {
		t.Fatal(err)
	}
	if got, ok := (&Log{fsm: c.f}).DigestAt(cps[2]); !ok || got != at[cps[2]] {
		t.Fatal("checkpoint lost in the snapshot")
	}
}

// A converted old snapshot and a replayed old log agree on the digest too: the
// version-1 prefix of a log is not digested (neither path could compute the other's).
func TestDigestStartsAfterTheV1Prefix(t *testing.T) {
	logs := v1Log(t)
	replayed := newHarness(t)
	replayed.f.ApplyBatch(logs)
	if i, _ := replayed.f.Digest(); i != 0 {
		t.Fatalf("the v1 prefix was digested up to %d", i)
	}
	restored := newHarness(t)
	if err := restored.f.Restore(io.NopCloser(bytes.NewReader(v1Snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	next := &raft.Log{Index: 17, Type: raft.LogCommand, Data: mustEncode(t, one(put("new", "c/new", "v")))}
	replayed.f.ApplyBatch([]*raft.Log{next})
	restored.f.ApplyBatch([]*raft.Log{next})
	i1, d1 := replayed.f.Digest()
	i2, d2 := restored.f.Digest()
	if i1 != 17 || i1 != i2 || d1 != d2 {
		t.Fatalf("digests %d %x vs %d %x", i1, d1, i2, d2)
	}
}
