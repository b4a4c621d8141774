package intentlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"testing"

	"github.com/hashicorp/raft"
)

// genLogs produces a seeded mix of every entry kind, valid and not, including commits
// built against the state of the reference FSM ref (so many of them are accepted).
func genLogs(t testing.TB, ref *harness, rng *rand.Rand, n int) []*raft.Log {
	var logs []*raft.Log
	holders := []string{"a", "b", "c"}
	for len(logs) < n {
		v := ref.f.View()
		var e Entry
		switch rng.Intn(12) {
		case 0, 1, 2, 3:
			var ins []Intent
			for j := rng.Intn(4); j >= 0; j-- {
				id := fmt.Sprintf("id-%d", rng.Intn(200))
				path := fmt.Sprintf("col%d/r%d", rng.Intn(3), rng.Intn(20))
				switch rng.Intn(10) {
				case 0:
					ins = append(ins, del(id, path))
				case 1:
					ins = append(ins, put(id, "bad", "x")) // reserved
				case 2:
					ins = append(ins, Intent{ID: id, Op: OpDel, Path: path, Value: []byte("v")})
				default:
					ins = append(ins, put(id, path, fmt.Sprint(rng.Int63())))
				}
			}
			e = IntentsEntry{Intents: ins}
		case 4:
			prev, rev := v.Lease.Epoch, v.Lease.Rev
			if rng.Intn(4) == 0 {
				prev = uint64(rng.Intn(3))
			}
			if rng.Intn(4) == 0 {
				rev = uint64(rng.Intn(int(ref.idx) + 1))
			}
			e = ClaimEntry{Holder: holders[rng.Intn(3)], Epoch: prev + 1, PrevRev: rev,
				TS: rng.Int63n(1e6), TTL: 1 + rng.Int63n(5000), Force: rng.Intn(3) == 0, Reason: []string{"", "why"}[rng.Intn(2)]}
			c := e.(ClaimEntry)
			c.Nonce = uint64(c.TS % 3) // none, or one of two processes (no draw: the logs stay the seed's)
			e = c
			if rng.Intn(6) == 0 {
				e = legacyClaim(e.(ClaimEntry), prev) // a version-1 claim (epoch-only rule)
			}
		case 5:
			e = RenewEntry{Holder: holders[rng.Intn(3)], Epoch: v.Lease.Epoch, PrevRev: v.Lease.Rev - uint64(rng.Intn(2)), TS: rng.Int63n(1e6)}
		case 6:
			e = ReleaseEntry{Holder: holders[rng.Intn(3)], Epoch: v.Lease.Epoch, PrevRev: v.Lease.Rev}
		case 7:
			e = TransferEntry{Holder: v.Lease.Holder, Epoch: v.Lease.Epoch, PrevRev: v.Lease.Rev, To: []string{"a", "b", "c", "z"}[rng.Intn(4)], TS: rng.Int63n(1e6)}
		case 8, 9, 10:
			pend := ref.pending()
			raw := commitRaw(ref, func(c *testCommit) {
				c.Ops = pend[:rng.Intn(len(pend)+1)]
				// Carried ops: mostly new IDs, sometimes one already remembered.
				for j := rng.Intn(3); j > 0; j-- {
					c.Ops = append(c.Ops, put(fmt.Sprintf("id-%d", rng.Intn(400)), fmt.Sprintf("col%d/r%d", rng.Intn(3), rng.Intn(20)), "carried"))
				}
				c.Time = rng.Int63n(1e6)
				if rng.Intn(8) == 0 {
					c.Seq++
				}
			})
			e = CommitEntry{Raw: raw}
		case 11:
			if rng.Intn(8) == 0 {
				nonce := make([]byte, 16)
				rng.Read(nonce)
				chain := testChain
				if rng.Intn(4) == 0 {
					chain = "did:key:zother"
				}
				e = GenesisEntry{Chain: chain, Version: 1, Nonce: nonce, TS: rng.Int63n(1e6)}
				break
			}
			if rng.Intn(2) == 0 {
				b := make([]byte, rng.Intn(20))
				rng.Read(b)
				if _, err := Decode(b); errors.Is(err, ErrCorrupt) {
					continue // a corrupt entry halts the FSM (halt_test.go), not this test's subject
				}
				ref.applyRaw(b)
				logs = append(logs, &raft.Log{Index: ref.idx, Type: raft.LogCommand, Data: b})
			} else {
				ids := holders[:1+rng.Intn(3)]
				ref.members(ids...)
				var cfg raft.Configuration
				for _, id := range ids {
					cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
				}
				logs = append(logs, &raft.Log{Index: ref.idx, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(cfg)})
			}
			continue
		}
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		ref.applyRaw(b)
		logs = append(logs, &raft.Log{Index: ref.idx, Type: raft.LogCommand, Data: b})
	}
	return logs
}

func TestDeterminismAndRestore(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			a := newHarness(t)
			logs := genLogs(t, a, rng, 300)
			if a.f.View().Head.Seq == 0 {
				t.Fatal("generator produced no accepted commit; the test would be weak")
			}

			// Replica b applies the same entries in random batch sizes.
			b := newHarness(t)
			for i := 0; i < len(logs); {
				n := 1 + rng.Intn(40)
				if i+n > len(logs) {
					n = len(logs) - i
				}
				b.f.ApplyBatch(logs[i : i+n])
				i += n
			}
			da := a.dump()
			if !bytes.Equal(da, b.dump()) {
				t.Fatal("replicas that applied the same entries produce different snapshots")
			}
			if a.f.View() != b.f.View() {
				t.Fatalf("views differ: %+v vs %+v", a.f.View(), b.f.View())
			}
			ia, dga := a.f.Digest()
			ib, dgb := b.f.Digest()
			if ia != a.idx || ia != ib || dga != dgb {
				t.Fatalf("digests differ across batch splits: %d %x vs %d %x", ia, dga, ib, dgb)
			}

			// A restored replica dumps the same bytes and stays in step afterwards.
			c := newHarness(t)
			c.mustAccept(one(put("junk", "x/y", "state to be replaced")))
			sub := c.f.notify.subscribe()
			defer sub.Close()
			if err := c.f.Restore(io.NopCloser(bytes.NewReader(da))); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-sub.C:
				if ev != (StateRestored{AppliedIndex: a.idx}) {
					t.Fatalf("event after restore %+v", ev)
				}
			default:
				t.Fatal("no StateRestored event")
			}
			if !bytes.Equal(da, c.dump()) {
				t.Fatal("restored replica's snapshot differs")
			}
			if c.f.View() != a.f.View() || fmt.Sprint(c.f.Rejections()) != fmt.Sprint(a.f.Rejections()) {
				t.Fatal("restored hot state differs")
			}
			c.idx = a.idx
			more := genLogs(t, a, rng, 50)
			c.f.ApplyBatch(more)
			if !bytes.Equal(a.dump(), c.dump()) {
				t.Fatal("restored replica diverged on later entries")
			}
			ia, dga = a.f.Digest()
			ic, dgc := c.f.Digest()
			if ia != ic || dga != dgc {
				t.Fatalf("restored replica's digest %d %x, want %d %x", ic, dgc, ia, dga)
			}
		})
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	src := newHarness(t)
	held(src)
	src.mustAccept(one(put("i", "c/r", "v")))
	good := src.dump()

	dst := newHarness(t)
	dst.mustAccept(one(put("keep", "k/k", "me")))
	keep := dst.dump()

	flip := func(i int) []byte { b := append([]byte{}, good...); b[i] ^= 0x40; return b }
	bad := map[string][]byte{
		"empty":         {},
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"magic":         flip(0),
		"version":       flip(len(snapMagic)),
		"body bit flip": flip(len(good) / 2),
		"checksum flip": flip(len(good) - 1),
		"no checksum":   good[:len(good)-32],
	}
	for name, b := range bad {
		err := dst.f.Restore(io.NopCloser(bytes.NewReader(b)))
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: restore err %v, want ErrMalformed or ErrCorrupt", name, err)
		}
		if !bytes.Equal(keep, dst.dump()) {
			t.Fatalf("%s: failed restore changed the state", name)
		}
	}
	if v, ok, _ := (&Log{fsm: dst.f}).Record("k/k"); ok || v != nil {
		// Unsigned intents are not records; the pending queue must still hold it.
		t.Fatal("unexpected record")
	}
	if dst.f.View().Pending != 1 {
		t.Fatal("old state lost after failed restores")
	}
}

func TestFSMReopenKeepsState(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	logs := genLogs(t, h, rand.New(rand.NewSource(7)), 100)
	before, view, rej := h.dump(), f.View(), fmt.Sprint(f.Rejections())
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f2, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if !bytes.Equal(before, dumpOf(t, f2)) || f2.View() != view || fmt.Sprint(f2.Rejections()) != rej {
		t.Fatal("reopened state differs")
	}
	// Replaying the whole log after a restart applies nothing twice.
	f2.ApplyBatch(logs)
	if !bytes.Equal(before, dumpOf(t, f2)) {
		t.Fatal("replayed entries were applied again")
	}
}

// FuzzApply: arbitrary entry bytes never panic the apply, and a rejected entry changes
// nothing but the rejection counters (and the applied index).
func FuzzApply(f *testing.F) {
	for _, e := range sampleEntries() {
		b, _ := Encode(e)
		f.Add(b)
		b, _ = Encode(markVersion(e, CodecVersionV3))
		f.Add(b)
	}
	for _, e := range []Entry{
		one(put("n", "c/n", "v")),
		ClaimEntry{Holder: "b", Epoch: 2, PrevRev: 2, TTL: 9},
		ClaimEntry{Holder: "b", Epoch: 2, PrevRev: 2, TTL: 9, Nonce: 1 << 63},
		RenewEntry{Holder: "a", Epoch: 1, PrevRev: 2, TS: 7},
		TransferEntry{Holder: "a", Epoch: 1, PrevRev: 2, To: "b"},
		legacyClaim(ClaimEntry{Holder: "b", Epoch: 2, TTL: 9}, 1),
	} {
		b, _ := Encode(e)
		f.Add(b)
	}
	h := newHarness(f)
	h.members("a", "b")
	heldWithPending(h)
	f.Add(encodeCommitForFuzz(h))
	carrying, _ := Encode(CommitEntry{Raw: commitRaw(h, func(c *testCommit) {
		c.Ops = append(c.Ops, put("carried", "c/7", "v"), del("carried-del", "c/1"))
		c.Time = 12345
	})})
	f.Add(carrying)
	f.Fuzz(func(t *testing.T, data []byte) {
		h.t = t
		before := h.stateDigest()
		rej := h.rejections()
		applied := h.f.View().AppliedIndex
		out := h.f.Apply(&raft.Log{Index: h.idx + 1, Term: 1, Type: raft.LogCommand, Data: data})
		if err, ok := out.(error); ok {
			// Only a corrupt entry halts, and a halt applies nothing at all.
			if _, derr := Decode(data); !errors.Is(derr, ErrCorrupt) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("apply failed with %v; Decode says %v", err, derr)
			}
			if h.stateDigest() != before || h.rejections() != rej || h.f.View().AppliedIndex != applied {
				t.Fatal("the halting entry changed the state")
			}
			h.f.fault.Store(nil) // un-halt, so fuzzing goes on from the same state
			return
		}
		h.idx++
		res, ok := out.(Result)
		if !ok {
			t.Fatalf("apply returned %#v", out)
		}
		if !res.Accepted {
			if h.stateDigest() != before {
				t.Fatalf("rejected entry (%s) changed the state", res.Reason)
			}
			if h.rejections() <= rej {
				t.Fatalf("rejected entry was not counted")
			}
		}
		if res.Index != h.idx {
			t.Fatalf("result index %d, want %d", res.Index, h.idx)
		}
	})
}

// encodeCommitForFuzz returns a valid Commit entry over the harness's pending intents.
func encodeCommitForFuzz(h *harness) []byte {
	b, _ := Encode(CommitEntry{Raw: commitRaw(h, nil)})
	return b
}
