// Package indigocheck has software nobody on this project wrote check an atproto
// chain: it replays a chain's commits (atproto.Replayer) and hands every commit's
// #commit event to indigo (github.com/bluesky-social/indigo): repo.VerifyCommitMessage,
// repo.LoadRepoFromCAR and Commit.VerifySignature, plus a relay's stateful checks (rev
// strictly increasing and not more than 5 minutes in the future, since and prevData
// the previous commit's), and loads the whole repository's CAR in indigo. For tests
// and drills; a binary that does not call it does not link indigo's API types.
package indigocheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/signer/chain/atproto"
)

// MaxFuture is how far in the future a relay accepts a rev.
const MaxFuture = 5 * time.Minute

// ErrFutureRev: a commit's rev is more than MaxFuture past the relay's clock (Chain's
// now); a relay refuses the commit.
var ErrFutureRev = errors.New("rev in the future")

// Result is what a checked chain holds.
type Result struct {
	Head    atproto.Head
	Commits int
	Records map[string][]byte // path -> record, read back through indigo from the CAR
}

// FutureRev is the relay's rev-in-the-future check: an error (ErrFutureRev) when rev
// is more than MaxFuture past now, the relay's clock.
func FutureRev(rev string, now time.Time) error {
	tid, err := syntax.ParseTID(rev)
	if err != nil {
		return fmt.Errorf("rev: %w", err)
	}
	if tid.Time().After(now.Add(MaxFuture)) {
		return fmt.Errorf("rev %s is %v in the future: %w", rev, tid.Time().Sub(now), ErrFutureRev)
	}
	return nil
}

// Chain checks raws (seq 1 first) of the chain chainDID as described in the package
// comment; now is the relay's clock for the future-rev check.
func Chain(ctx context.Context, raws [][]byte, chainDID string, now time.Time) (Result, error) {
	var res Result
	pub, err := atcrypto.ParsePublicDIDKey(chainDID)
	if err != nil {
		return res, err
	}
	rp := atproto.NewReplayer(chainDID)
	var prev atproto.Head
	for i, raw := range raws {
		seq := i + 1
		st, err := rp.Next(raw)
		if err != nil {
			return res, fmt.Errorf("seq %d: replay: %w", seq, err)
		}
		if prev.Rev != "" && st.Head.Rev <= prev.Rev {
			return res, fmt.Errorf("seq %d: rev %s is not after %s", seq, st.Head.Rev, prev.Rev)
		}
		if err := FutureRev(st.Head.Rev, now); err != nil {
			return res, fmt.Errorf("seq %d: %w", seq, err)
		}
		ev, err := atproto.NewEvent(prev, st)
		if err != nil {
			return res, fmt.Errorf("seq %d: %w", seq, err)
		}
		if !bytes.Equal(ev.PrevData, prev.Data) || ev.Since != prev.Rev {
			return res, fmt.Errorf("seq %d: prevData/since are not the previous commit's", seq)
		}
		msg, err := message(ev, int64(seq), now)
		if err != nil {
			return res, err
		}
		if _, err := repo.VerifyCommitMessage(ctx, msg); err != nil {
			return res, fmt.Errorf("seq %d: indigo VerifyCommitMessage: %w", seq, err)
		}
		ic, ir, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(msg.Blocks))
		if err != nil {
			return res, fmt.Errorf("seq %d: indigo LoadRepoFromCAR (event): %w", seq, err)
		}
		if err := ic.VerifySignature(pub); err != nil {
			return res, fmt.Errorf("seq %d: indigo VerifySignature: %w", seq, err)
		}
		if root, err := ir.MST.RootCID(); err != nil || !bytes.Equal(root.Bytes(), st.Head.Data) {
			return res, fmt.Errorf("seq %d: indigo's MST root %v is not the commit's data %x (%v)", seq, root, st.Head.Data, err)
		}
		prev = st.Head
		res.Commits++
	}
	res.Head = prev
	if prev.Commit == nil {
		return res, nil
	}
	var car bytes.Buffer
	if err := rp.WriteCAR(&car); err != nil {
		return res, err
	}
	ic, ir, err := repo.LoadRepoFromCAR(ctx, &car)
	if err != nil {
		return res, fmt.Errorf("indigo LoadRepoFromCAR (whole repository): %w", err)
	}
	if err := ic.VerifySignature(pub); err != nil {
		return res, fmt.Errorf("indigo VerifySignature (whole repository): %w", err)
	}
	res.Records = map[string][]byte{}
	err = ir.MST.Walk(func(key []byte, _ cid.Cid) error {
		nsid, rkey, err := syntax.ParseRepoPath(string(key))
		if err != nil {
			return err
		}
		b, _, err := ir.GetRecordBytes(ctx, nsid, rkey)
		if err != nil {
			return err
		}
		res.Records[string(key)] = b
		return nil
	})
	return res, err
}

// message is ev as indigo's #commit type.
func message(ev atproto.Event, seq int64, now time.Time) (*comatproto.SyncSubscribeRepos_Commit, error) {
	var bad error
	lnk := func(b []byte) *lexutil.LexLink {
		if b == nil {
			return nil
		}
		c, err := cid.Cast(b)
		if err != nil {
			bad = err
			return nil
		}
		l := lexutil.LexLink(c)
		return &l
	}
	commit := lnk(ev.Commit)
	if commit == nil {
		return nil, fmt.Errorf("event without a commit CID: %v", bad)
	}
	msg := &comatproto.SyncSubscribeRepos_Commit{Repo: ev.Repo, Rev: ev.Rev, Seq: seq,
		Time: now.UTC().Format("2006-01-02T15:04:05.000Z"), Commit: *commit,
		Blocks: ev.Blocks, PrevData: lnk(ev.PrevData), Blobs: []lexutil.LexLink{}}
	if ev.Since != "" {
		msg.Since = &ev.Since
	}
	for _, op := range ev.Ops {
		msg.Ops = append(msg.Ops, &comatproto.SyncSubscribeRepos_RepoOp{Action: op.Action, Path: op.Path, Cid: lnk(op.CID), Prev: lnk(op.Prev)})
	}
	return msg, bad
}
