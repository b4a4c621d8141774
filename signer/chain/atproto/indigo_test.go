package atproto

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/signer/chain"
)

// TestIndigoAcceptsDrill runs a chain with failovers between three devices whose
// clocks are skewed (one 4 minutes slow, one 2 minutes fast), each replica applying
// every commit, and has indigo's own code check every commit's #commit event (a CAR
// slice of the commit's new blocks, built by NewEvent): repo.VerifyCommitMessage,
// repo.LoadRepoFromCAR and Commit.VerifySignature; plus the relay's stateful checks
// (rev strictly increasing, not more than 5 minutes in the future, prevData and since
// the previous commit's). At
// failover the old holder's last signed commit is lost; the new holder builds on the
// applied head and the lost commit is then refused. The records at the end are the
// ops applied, and every replica has the same repository. Once with a P-256 chain
// key, once with a K-256 one.
func TestIndigoAcceptsDrill(t *testing.T) {
	for _, typ := range []string{KeyTypeP256, KeyTypeK256} {
		t.Run(typ, func(t *testing.T) {
			k, err := GenerateKeyOf(typ)
			if err != nil {
				t.Fatal(err)
			}
			indigoDrill(t, k)
		})
	}
}

func indigoDrill(t *testing.T, k *Key) {
	ctx := context.Background()
	pub, err := atcrypto.ParsePublicDIDKey(k.DID())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(22, 1))
	devices := []struct {
		name string
		skew time.Duration
	}{{"peerA", 0}, {"peerB", -4 * time.Minute}, {"peerC", 2 * time.Minute}}
	reps := []*replica{newReplica(), newReplica(), newReplica()}
	reps[1].trees = &TreeCache{} // one replica keeps its tree between commits: same steps
	trueNow := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	const aheadBound = 30 * time.Second // proposal clock bound past log time
	var logTime int64                   // ms: the latest envelope time applied
	model := map[string][]byte{}        // path -> record: what the ops say
	var lastRev string
	var lastData []byte
	var applied [][]byte
	seqEvents, lost := 0, 0
	epoch := uint64(0)
	for round := range rounds {
		epoch++
		d := devices[round%len(devices)]
		holder := reps[round%len(reps)]
		for n := range perRound {
			trueNow = trueNow.Add(time.Duration(50+rng.IntN(400)) * time.Millisecond)
			now := trueNow.Add(d.skew)
			bound := time.UnixMilli(logTime).Add(aheadBound)
			if logTime == 0 {
				bound = now
			}
			rev, err := NextRev(now.UnixMicro(), bound.UnixMicro(), holder.head.Rev, uint(round))
			if err != nil {
				t.Fatal(err)
			}
			ops := randomOps(t, rng, model, fmt.Sprintf("r%dn%d", round, n))
			c := chain.Commit{Seq: holder.seq + 1, Epoch: epoch, Signer: d.name, Time: now.UnixMilli(), Ops: ops}
			if holder.seq > 0 {
				c.Prev = holder.hash[:]
			}
			raw, err := Propose(k, holder.bs, holder.head, c, testDID, rev)
			if err != nil {
				t.Fatalf("round %d commit %d: propose: %v", round, n, err)
			}
			if n == perRound-1 && round < rounds-1 {
				// Failover: this commit was signed but never reached the log. Keep it;
				// after the next holder's first commit it must be refused.
				defer func(raw []byte) {
					if _, err := reps[0].apply(raw); err == nil {
						t.Errorf("a commit lost at failover was accepted later")
					}
				}(raw)
				lost++
				continue
			}
			var step Step
			for i, r := range reps {
				st, err := r.apply(raw)
				if err != nil {
					t.Fatalf("round %d commit %d: replica %d refused: %v", round, n, i, err)
				}
				if i == 0 {
					step = st
				} else if !bytes.Equal(st.Head.Data, step.Head.Data) || !bytes.Equal(st.Head.Commit, step.Head.Commit) {
					t.Fatalf("replicas differ after seq %d", r.seq)
				}
			}
			applied = append(applied, raw)
			logTime = max(logTime, c.Time)
			for _, op := range ops {
				if op.Kind == chain.Put {
					model[op.Path] = op.Value
				} else {
					delete(model, op.Path)
				}
			}
			seqEvents++
			// The relay's stateful checks.
			tid, _ := syntax.ParseTID(step.Head.Rev)
			if step.Head.Rev <= lastRev {
				t.Fatalf("rev %s not after %s", step.Head.Rev, lastRev)
			}
			if tid.Time().After(trueNow.Add(5 * time.Minute)) {
				t.Fatalf("rev %s is %v in the future", step.Head.Rev, tid.Time().Sub(trueNow))
			}
			// The event any replica serves: a CAR slice of the commit's new blocks.
			ev, err := NewEvent(Head{Rev: lastRev, Data: lastData}, step)
			if err != nil {
				t.Fatal(err)
			}
			msg := eventMessage(t, ev, int64(seqEvents), trueNow)
			if _, err := repo.VerifyCommitMessage(ctx, msg); err != nil {
				t.Fatalf("seq %d: indigo VerifyCommitMessage: %v", reps[0].seq, err)
			}
			ic, ir, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(msg.Blocks))
			if err != nil {
				t.Fatalf("seq %d: indigo LoadRepoFromCAR: %v", reps[0].seq, err)
			}
			if err := ic.VerifySignature(pub); err != nil {
				t.Fatalf("seq %d: indigo VerifySignature: %v", reps[0].seq, err)
			}
			ours, _ := DecodeEnvelope(raw)
			theirs, _ := ic.UnsignedBytes()
			mine, _ := ours.Repo.UnsignedBytes()
			if !bytes.Equal(theirs, mine) {
				t.Fatalf("indigo's commit encoding differs from ours:\n%x\n%x", theirs, mine)
			}
			root, err := ir.MST.RootCID()
			if err != nil || !bytes.Equal(root.Bytes(), step.Head.Data) {
				t.Fatalf("indigo's MST root %v, ours %x", root, step.Head.Data)
			}
			lastRev, lastData = step.Head.Rev, step.Head.Data
		}
	}
	// The whole repository, from the replica that held least: indigo reads every record.
	var car bytes.Buffer
	bl, err := RepoBlocks(reps[2].bs, reps[2].head)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteCAR(&car, reps[2].head.Commit, bl); err != nil {
		t.Fatal(err)
	}
	ic, ir, err := repo.LoadRepoFromCAR(ctx, &car)
	if err != nil {
		t.Fatal(err)
	}
	if err := ic.VerifySignature(pub); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = ir.MST.Walk(func(key []byte, _ cid.Cid) error {
		nsid, rkey, err := syntax.ParseRepoPath(string(key))
		if err != nil {
			return err
		}
		b, _, err := ir.GetRecordBytes(ctx, nsid, rkey)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, model[string(key)]) {
			return fmt.Errorf("record %s differs from the ops applied", key)
		}
		n++
		return nil
	})
	if err != nil || n != len(model) {
		t.Fatalf("records: %v (%d read, %d applied)", err, n, len(model))
	}
	// An export replayed elsewhere gives the same repository; getRecord reads it.
	rp := NewReplayer(k.DID())
	for _, raw := range applied {
		if _, err := rp.Next(raw); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(rp.Head().Commit, reps[2].head.Commit) {
		t.Fatal("the replayed export has another head")
	}
	for path, rec := range model {
		got, _, err := GetRecord(rp.Blocks(), rp.Head(), path)
		if err != nil || !bytes.Equal(got, rec) {
			t.Fatalf("getRecord %s: %v", path, err)
		}
	}
	if _, err := rp.Next(applied[0]); chain.ReasonOf(err) != chain.ReasonBadSeq {
		t.Fatalf("a replayed commit again: %v", err)
	}
	t.Logf("%d commits accepted by indigo, %d lost at failover and refused, %d records, final rev %s", seqEvents, lost, n, lastRev)
}

// randomOps makes 1-4 net ops (distinct paths): creates, updates and deletes.
func randomOps(t *testing.T, rng *rand.Rand, model map[string][]byte, tag string) []chain.Op {
	var ops []chain.Op
	used := map[string]bool{}
	for i := range 1 + rng.IntN(maxOps) {
		path := fmt.Sprintf("app.bsky.feed.post/3l3qo2vut%04d", rng.IntN(keySpace))
		if used[path] {
			continue
		}
		used[path] = true
		id := fmt.Sprintf("%s-%d", tag, i)
		if _, ok := model[path]; ok && rng.IntN(3) == 0 {
			ops = append(ops, chain.Op{ID: id, Kind: chain.Del, Path: path})
		} else {
			ops = append(ops, chain.Op{ID: id, Kind: chain.Put, Path: path, Value: record(t, id)})
		}
	}
	return ops
}

// eventMessage is ev as indigo's type.
func eventMessage(t *testing.T, ev Event, seq int64, now time.Time) *comatproto.SyncSubscribeRepos_Commit {
	t.Helper()
	lnk := func(b []byte) *lexutil.LexLink {
		if b == nil {
			return nil
		}
		c, err := cid.Cast(b)
		if err != nil {
			t.Fatal(err)
		}
		l := lexutil.LexLink(c)
		return &l
	}
	msg := &comatproto.SyncSubscribeRepos_Commit{Repo: ev.Repo, Rev: ev.Rev, Seq: seq,
		Time: now.UTC().Format("2006-01-02T15:04:05.000Z"), Commit: *lnk(ev.Commit),
		Blocks: ev.Blocks, PrevData: lnk(ev.PrevData), Blobs: []lexutil.LexLink{}}
	if ev.Since != "" {
		msg.Since = &ev.Since
	}
	for _, op := range ev.Ops {
		msg.Ops = append(msg.Ops, &comatproto.SyncSubscribeRepos_RepoOp{Action: op.Action, Path: op.Path, Cid: lnk(op.CID), Prev: lnk(op.Prev)})
	}
	return msg
}

// The drill's key space and ops per commit: a few hundred records make a tree of
// several levels, so that inverting a delete needs nodes the slice does not hold.
const (
	keySpace = 400
	rounds   = 9
	perRound = 20
	maxOps   = 8
)
