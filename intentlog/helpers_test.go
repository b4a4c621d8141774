package intentlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// testCommit is a trivial commit encoding for tests (the real one is package signer's):
// the wire primitives over CommitInfo's fields plus a "signature" that must read "ok".
// Chain defaults to testChain. testVerify also reads the format of the older tests
// ("testcommit", without chain and time: the commits in testdata/v1), as chain
// testChain at time 0.
type testCommit struct {
	CommitInfo
	Sig string
}

const testChain = "did:key:z6MktestChain"

func (c testCommit) encode() []byte {
	w := &wbuf{}
	w.str("testcommit2")
	chain := c.Chain
	if chain == "" {
		chain = testChain
	}
	w.str(chain)
	w.varint(c.Time)
	w.uvarint(c.Seq)
	w.uvarint(c.Epoch)
	w.str(c.Signer)
	w.optBytes(c.Prev)
	w.uvarint(uint64(len(c.Ops)))
	for _, in := range c.Ops {
		encodeIntent(w, in)
	}
	w.str(c.Sig)
	return w.b
}

var errTestSig = errors.New("test signature refused")

func testVerify(raw []byte) (CommitInfo, error) {
	r := &rbuf{b: raw}
	var ci CommitInfo
	switch r.str() {
	case "testcommit":
		ci.Chain = testChain
	case "testcommit2":
		ci.Chain = r.str()
		ci.Time = r.varint()
	default:
		return CommitInfo{}, errTestSig
	}
	ci.Seq = r.uvarint()
	ci.Epoch = r.uvarint()
	ci.Signer = r.str()
	ci.Prev = r.optBytes()
	n := r.count(4)
	for i := 0; i < n; i++ {
		ci.Ops = append(ci.Ops, decodeIntent(r))
	}
	sig := r.str()
	if err := r.done(); err != nil {
		return CommitInfo{}, err
	}
	if sig != "ok" {
		return CommitInfo{}, errTestSig
	}
	return ci, nil
}

// harness drives an FSM directly with consecutive Raft indexes.
type harness struct {
	t   testing.TB
	f   *FSM
	idx uint64
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	return newHarnessVerify(t, testVerify)
}

func newHarnessVerify(t testing.TB, verify CommitVerifier) *harness {
	t.Helper()
	f, err := NewFSM(t.TempDir(), verify)
	if err != nil {
		t.Fatal(err)
	}
	f.db.NoSync = true // these tests check logic; the cluster tests keep fsync on
	t.Cleanup(func() { f.Close() })
	return &harness{t: t, f: f}
}

// rev is the stored lease record's revision (what a lease write names as PrevRev).
func (h *harness) rev() uint64 { return h.f.View().Lease.Rev }

func (h *harness) applyRaw(data []byte) Result {
	h.t.Helper()
	h.idx++
	res, ok := h.f.Apply(&raft.Log{Index: h.idx, Term: 1, Type: raft.LogCommand, Data: data}).(Result)
	if !ok {
		h.t.Fatalf("apply returned no Result")
	}
	return res
}

func (h *harness) apply(e Entry) Result {
	h.t.Helper()
	b, err := Encode(e)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.applyRaw(b)
}

// mustAccept applies e and fails the test if it was rejected.
func (h *harness) mustAccept(e Entry) Result {
	h.t.Helper()
	res := h.apply(e)
	if !res.Accepted {
		h.t.Fatalf("entry %#v rejected: %s", e, res.Reason)
	}
	return res
}

func (h *harness) members(ids ...string) {
	h.t.Helper()
	var cfg raft.Configuration
	for _, id := range ids {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	h.idx++
	h.f.ApplyBatch([]*raft.Log{{Index: h.idx, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(cfg)}})
}

// commit builds, applies and returns a test commit over the oldest n pending intents.
func (h *harness) commitPending(n int) (Result, []byte) {
	h.t.Helper()
	pend := h.pending()
	if len(pend) < n {
		h.t.Fatalf("only %d pending", len(pend))
	}
	v := h.f.View()
	c := testCommit{CommitInfo: CommitInfo{Seq: v.Head.Seq + 1, Epoch: v.Lease.Epoch,
		Signer: v.Lease.Holder, Ops: pend[:n]}, Sig: "ok"}
	if v.Head.Seq > 0 {
		c.Prev = append([]byte{}, v.Head.Hash[:]...)
	}
	raw := c.encode()
	return h.apply(CommitEntry{Raw: raw}), raw
}

func (h *harness) pending() []Intent {
	h.t.Helper()
	var out []Intent
	err := h.f.read(func(tx *bolt.Tx) error {
		c := tx.Bucket(bPending).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			p, err := unseal(bPending, k, v)
			if err != nil {
				return err
			}
			in, err := decodeIntentValue(p)
			if err != nil {
				return err
			}
			out = append(out, in)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) dump() []byte {
	h.t.Helper()
	return dumpOf(h.t, h.f)
}

func dumpOf(t testing.TB, f *FSM) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f.Dump(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// stateDigest hashes every bucket except the rejection counters and the digest
// checkpoints, with the meta's applied index and digest zeroed: what a rejected entry
// must leave unchanged.
func (h *harness) stateDigest() [32]byte {
	h.t.Helper()
	hs := sha256.New()
	err := h.f.read(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if bytes.Equal(name, bRejections) || bytes.Equal(name, bDigests) {
				continue
			}
			hs.Write(name)
			c := tx.Bucket(name).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if bytes.Equal(name, bMeta) && bytes.Equal(k, keyState) {
					m, err := decodeMeta(v)
					if err != nil {
						return err
					}
					m.Applied, m.DigestIndex, m.Digest, m.DigestCount = 0, 0, [32]byte{}, 0
					v = m.encode()
				}
				w := &wbuf{}
				w.bytes(k)
				w.bytes(v)
				hs.Write(w.b)
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	var out [32]byte
	copy(out[:], hs.Sum(nil))
	return out
}

func (h *harness) rejections() uint64 {
	var n uint64
	for _, v := range h.f.Rejections() {
		n += v
	}
	return n
}

// legacyClaim returns e as a version-1 claim would decode: PrevEpoch instead of
// PrevRev, and the epoch-only rule.
func legacyClaim(e ClaimEntry, prevEpoch uint64) ClaimEntry {
	e.PrevRev, e.v1, e.prevEpoch = 0, true, prevEpoch
	return e
}

func hashOf(b []byte) [32]byte { return sha256.Sum256(b) }
