package intentlog

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// TestPreverifySameApply: a replica whose commits were verified ahead of the apply
// (as its Raft log write starts it) ends in exactly the state of one that verified
// them in the apply, in any batching; and each started check is used instead of a
// second verification.
func TestPreverifySameApply(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			a := newHarness(t)
			logs := genLogs(t, a, rng, 300)
			if a.f.View().Head.Seq == 0 {
				t.Fatal("generator produced no accepted commit; the test would be weak")
			}
			var calls atomic.Int64
			counted := func(raw []byte) (CommitInfo, error) { calls.Add(1); return testVerify(raw) }
			b := newHarnessVerify(t, counted)
			commits := 0
			for _, l := range logs {
				if e, err := Decode(l.Data); err == nil && l.Type == raft.LogCommand {
					if _, ok := e.(CommitEntry); ok {
						commits++
					}
				}
			}
			for i := 0; i < len(logs); {
				n := 1 + rng.Intn(40)
				if i+n > len(logs) {
					n = len(logs) - i
				}
				b.f.pre.start(logs[i : i+n]) // what the log store's write does
				b.f.ApplyBatch(logs[i : i+n])
				i += n
			}
			if !bytes.Equal(a.dump(), b.dump()) || a.f.View() != b.f.View() {
				t.Fatal("a replica that verified ahead of the apply differs from one that did not")
			}
			if got := calls.Load(); got != int64(commits) {
				t.Fatalf("%d verifications for %d commit entries: the apply did not take the started checks", got, commits)
			}
		})
	}
}

// TestPreverifyPanicAndMiss: a verifier that panics in a started check refuses the
// commit exactly as one that panics in the apply; bytes never started are verified
// by the apply itself.
func TestPreverifyPanicAndMiss(t *testing.T) {
	boom := func(raw []byte) (CommitInfo, error) {
		if string(raw) == "boom" {
			panic("verifier bug")
		}
		return testVerify(raw)
	}
	p := newPreverifier(boom)
	data, err := Encode(CommitEntry{Raw: []byte("boom")})
	if err != nil {
		t.Fatal(err)
	}
	p.start([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}})
	if _, ok := verifySafely(p.verifier(), []byte("boom")); ok {
		t.Fatal("a panicking started check accepted the commit")
	}
	if _, ok := verifySafely(boom, []byte("boom")); ok {
		t.Fatal("a panicking verifier accepted the commit")
	}
	raw := testCommit{CommitInfo: CommitInfo{Seq: 1, Epoch: 1, Signer: "a", Ops: []Intent{put("i", "c/r", "v")}}, Sig: "ok"}.encode()
	want, werr := testVerify(raw)
	got, gerr := p.verifier()(raw) // never started: verified here
	if fmt.Sprint(got, gerr) != fmt.Sprint(want, werr) {
		t.Fatalf("miss: %v %v, want %v %v", got, gerr, want, werr)
	}
}

// TestPreverifyBounded: checks never taken (entries Raft dropped) are forgotten past
// the bounds, by count and by bytes.
func TestPreverifyBounded(t *testing.T) {
	p := newPreverifier(testVerify)
	for i := range preverifyMax + 10 {
		data, err := Encode(CommitEntry{Raw: []byte(fmt.Sprint("c", i))})
		if err != nil {
			t.Fatal(err)
		}
		p.startData(data)
	}
	if len(p.m) != preverifyMax || len(p.order) != preverifyMax {
		t.Fatalf("%d checks kept (%d in order), want %d", len(p.m), len(p.order), preverifyMax)
	}
	big := make([]byte, preverifyMaxBytes/2+1)
	for i := range 3 {
		big[0] = byte(i)
		data, err := Encode(CommitEntry{Raw: big})
		if err != nil {
			t.Fatal(err)
		}
		p.startData(data)
	}
	if p.bytes > preverifyMaxBytes {
		t.Fatalf("%d bytes kept, bound %d", p.bytes, preverifyMaxBytes)
	}
}
