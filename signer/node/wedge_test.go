package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
)

// signCounter counts, through the BeforePropose knob, how many distinct commits
// the node proposed for each seq (the same bytes re-proposed count once).
type signCounter struct {
	mu    sync.Mutex
	bySeq map[uint64]map[[chain.HashSize]byte]bool
}

func (s *signCounter) hook(ctx context.Context, e any) context.Context {
	ce, ok := e.(intentlog.CommitEntry)
	if !ok {
		return ctx
	}
	c, err := chain.Decode(ce.Raw)
	if err != nil {
		return ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bySeq[c.Seq] == nil {
		s.bySeq[c.Seq] = map[[chain.HashSize]byte]bool{}
	}
	s.bySeq[c.Seq][chain.Hash(ce.Raw)] = true
	return ctx
}

// most returns the largest number of distinct commits signed for one seq.
func (s *signCounter) most() (seq uint64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for q, m := range s.bySeq {
		if len(m) > n {
			seq, n = q, len(m)
		}
	}
	return seq, n
}

// TestOddIntentNeverWedges (issue 19.1): an intent ID with a control character
// (U+0001, U+0000) is refused at the Go API with the apply's reason; it never reaches
// a commit, so the holder never signs a commit the apply refuses, never signs one
// seq twice, and the next intent is signed at once.
func TestOddIntentNeverWedges(t *testing.T) {
	sc := &signCounter{bySeq: map[uint64]map[[chain.HashSize]byte]bool{}}
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 7))
	cfg.Bootstrap = true
	cfg.Knobs = &knobs.Node{BeforePropose: sc.hook}
	n := startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "the lease", n.Holds)
	for i, id := range []string{"bad\u0001id", "bad\u0000id"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		in := testutil.Put(id)
		in.Path = "app/b"
		_, err := n.Submit(ctx, in, WaitSigned)
		cancel()
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("submit %q: %v, want ErrBadRequest", id, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		ok := fmt.Sprintf("ok-%d", i)
		if _, err := n.Submit(ctx, testutil.Put(ok), WaitSigned); err != nil {
			t.Errorf("submit %q after %q: %v", ok, id, err)
		}
		cancel()
	}
	st := n.loop.Stats()
	if seq, most := sc.most(); most > 1 {
		t.Errorf("the holder signed %d different commits for seq %d", most, seq)
	}
	if st.CommitsRejected != 0 || st.SignedRefused != 0 || st.Bumps != 0 {
		t.Errorf("loop stats: rejected %d, signed-refused %d, bumps %d (want 0)", st.CommitsRejected, st.SignedRefused, st.Bumps)
	}
	if ids := opIDs(t, chainOfNode(t, n)); fmt.Sprint(ids) != "[ok-0 ok-1]" {
		t.Errorf("chain ops %q", ids)
	}
}

// TestMissedEntranceIsADefect (issue 19.1, defence in depth): with the entrances'
// check off (a knob standing for a missed entrance), an invalid ID reaches a commit;
// the apply refuses it once (bad_ops); the submitter gets the apply's reason, the
// refusal is counted and shown as a defect in State and the metrics, the holder
// keeps signing, and the seq is never signed again with that op.
func TestMissedEntranceIsADefect(t *testing.T) {
	sc := &signCounter{bySeq: map[uint64]map[[chain.HashSize]byte]bool{}}
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 9))
	cfg.Bootstrap = true
	cfg.Knobs = &knobs.Node{BeforePropose: sc.hook, Signer: &knobs.Signer{SkipValidation: true}}
	n := startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "the lease", n.Holds)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in := testutil.Put("bad\u0001id")
	if _, err := n.Submit(ctx, in, WaitSigned); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("submit: %v, want the apply's reason (bad request)", err)
	}
	if _, err := n.Submit(ctx, testutil.Put("ok"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	st := n.State()
	rs := n.RefusalStats()
	if st.Defect == "" || !st.Healthy || st.Loop.CommitsRefused["bad_ops"] != 1 || rs.ContentRefused[intentlog.ReasonBadOps] != 1 {
		t.Fatalf("state: defect %q healthy %v refused %v", st.Defect, st.Healthy, st.Loop.CommitsRefused)
	}
	if rs.SignedRefused != 1 || rs.Bumps != 1 {
		t.Fatalf("refusal stats %+v", rs)
	}
	if seq, most := sc.most(); most > 2 {
		t.Fatalf("%d commits signed for seq %d", most, seq)
	}
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "baton_commits_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "bad_ops" && m.GetCounter().GetValue() == 1 {
				found = true
			}
		}
	}
	if !found {
		t.Fatal(`no baton_commits_refused_total{reason="bad_ops"} 1 in the metrics`)
	}
}
