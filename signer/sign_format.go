package signer

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// How the loop signs on a chain whose format is not baton's own (see sign.go for the
// pipeline). The chain's format is its genesis's (View.Genesis.Version).
//
// A stateful format (atproto) signs on top of its repository, which the loop reads
// from the local replica: it signs one commit at a time (MaxInFlight 1), so the
// repository it reads is always the one the commit builds on. Pipelining would need a
// predicted repository over the commits in flight; that is not done (one commit per
// Raft round: atproto throughput is one round per commit batch).

// MaxRevAhead bounds an atproto commit's rev past the replicated log time: the
// proposer's clock is taken as min(clock, log time + MaxRevAhead), so that a device
// whose clock runs fast cannot carry a future rev into every later commit (relays
// refuse revs more than 5 minutes ahead). rev = max(that, previous rev + 1).
const MaxRevAhead = time.Minute

// formatReader is what a stateful format's signer needs of the log besides ChainLog:
// the applied format state (*intentlog.Log and the node's proposer have it).
type formatReader interface {
	ReadFormat(fn func(intentlog.FormatStore) error) error
}

// maxInFlight is the pipeline depth on the chain v describes.
func (l *Loop) maxInFlight(v intentlog.View) int {
	if chainFormatOf(v) != chain.FormatBaton {
		return 1
	}
	return l.cfg.MaxInFlight
}

func chainFormatOf(v intentlog.View) uint64 {
	if v.Genesis.Index == 0 || v.Genesis.Version == 0 {
		return chain.FormatBaton
	}
	return v.Genesis.Version
}

// signCommit signs cm in the chain's format. On an atproto chain only with nothing in
// flight (maxInFlight): the repository read is the applied one, and it must be the
// repository of the applied head v.Head (else an error: retry at the next tick).
func (l *Loop) signCommit(v intentlog.View, cm chain.Commit) ([]byte, error) {
	switch f := chainFormatOf(v); f {
	case chain.FormatBaton:
		return chain.Sign(l.cfg.Key, cm)
	case chain.FormatAtproto:
		return l.signAtproto(v, cm)
	default:
		return nil, fmt.Errorf("%w: this build cannot sign commit format %d", chain.ErrUnknownFormat, f)
	}
}

func (l *Loop) signAtproto(v intentlog.View, cm chain.Commit) ([]byte, error) {
	fr, ok := l.cfg.Log.(formatReader)
	if !ok {
		return nil, fmt.Errorf("%w: the log does not expose the repository (ReadFormat)", chain.ErrInvalidCommit)
	}
	if cm.Seq != v.Head.Seq+1 {
		return nil, fmt.Errorf("atproto: commit seq %d is not after the applied head %d (one commit in flight at most)", cm.Seq, v.Head.Seq)
	}
	// The repository's commit at the applied head, to check the state read below.
	var wantCommit []byte
	if v.Head.Seq > 0 {
		raw, err := l.cfg.Log.Commit(v.Head.Seq)
		if err != nil {
			return nil, fmt.Errorf("atproto: read the head commit: %w", err)
		}
		e, err := atproto.DecodeEnvelope(raw)
		if err != nil {
			return nil, fmt.Errorf("atproto: the head commit: %w", err)
		}
		wantCommit = atproto.CIDOf(e.Block)
	}
	now := l.cfg.Clock.Now()
	if k := l.knobs(); l.cfg.RevClock != nil && !k.UnboundedRev && !k.OwnRevClock {
		var ok bool
		if now, ok = l.cfg.RevClock(); !ok {
			return nil, errNoRevClock
		}
	}
	bound := now
	if v.LogTime > 0 && !l.knobs().UnboundedRev {
		bound = time.UnixMilli(v.LogTime).Add(MaxRevAhead)
	}
	var raw []byte
	err := fr.ReadFormat(func(st intentlog.FormatStore) error {
		head, err := atproto.DecodeHead(st.Head())
		if err != nil {
			return err
		}
		if !bytes.Equal(head.Commit, wantCommit) {
			return errRepoMoved
		}
		did := head.DID
		if did == "" {
			did = l.did // a new repository: its DID is the chain key's did:key
		}
		rev, err := atproto.NextRev(now.UnixMicro(), bound.UnixMicro(), head.Rev, uint(cm.Epoch%1024))
		if err != nil {
			return err
		}
		raw, err = atproto.Propose(l.cfg.Key, storeBlocks{st}, head, cm, did, rev)
		return err
	})
	return raw, err
}

// errNoRevClock: the rev clock (LoopConfig.RevClock) is not known yet; sign at the
// next tick.
var errNoRevClock = errors.New("atproto: the cluster's clock is not measured yet (a majority of the voters' clocks): the rev waits for it")

var errRepoMoved = errors.New("atproto: the applied repository is not the applied head's (the state moved while reading): retry")

// CheckChainDID checks that did names a chain key some commit format signs with: an
// Ed25519 did:key (baton's format) or a P-256 or K-256 did:key (atproto).
func CheckChainDID(did string) error {
	_, err := ChainFormatOfDID(did)
	return err
}

// CheckRepoDID checks that a chain whose key is chainDID may name its repository
// repo in its genesis (intentlog.GenesisEntry.Repo): an atproto chain (a P-256 or
// K-256 chain key) and a did:plc in its exact syntax (atproto.CheckRepoDID; not
// resolved: that the DID document's #atproto key is the chain key is the user's to
// make sure of).
func CheckRepoDID(chainDID, repo string) error {
	if f, err := ChainFormatOfDID(chainDID); err != nil || f != chain.FormatAtproto {
		return fmt.Errorf("%w: only an atproto chain (a P-256 or K-256 chain key) names a repository DID", chain.ErrInvalidDID)
	}
	return atproto.CheckRepoDID(repo)
}

// ChainFormatOfDID is the commit format a new chain with this chain key declares in
// its genesis: baton's for an Ed25519 did:key, atproto's for a P-256 or K-256 one.
func ChainFormatOfDID(did string) (uint64, error) {
	_, err := chain.ParseDID(did)
	if err == nil {
		return chain.FormatBaton, nil
	}
	if atproto.IsKeyDID(did) {
		return chain.FormatAtproto, nil
	}
	return 0, err
}

// FormatOfDID is the registered format of a chain whose key is did (ChainFormatOfDID):
// how its commits verify, hash and chain (chain.VerifyOf, chain.NewStepper).
func FormatOfDID(did string) (chain.Format, error) {
	id, err := ChainFormatOfDID(did)
	if err != nil {
		return nil, err
	}
	return chain.FormatOf(id)
}

// DecodeCommit decodes an applied commit of any format (no signature check): its
// fence and ops.
func DecodeCommit(raw []byte) (chain.Commit, error) {
	if isAtproto(raw) {
		e, err := atproto.DecodeEnvelope(raw)
		return e.Commit, err
	}
	return chain.Decode(raw)
}
