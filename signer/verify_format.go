package signer

import (
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

func init() {
	intentlog.RegisterIntentRule(chain.FormatAtproto, func(in intentlog.Intent) error {
		return atproto.CheckOp(chain.Op{ID: in.ID, Kind: chain.Kind(in.Op), Path: in.Path, Value: in.Value})
	})
	intentlog.RegisterGenesisRule(chain.FormatAtproto, AtprotoGenesisHead)
}

// AtprotoGenesisHead is the repository an atproto chain whose genesis names its
// repository DID (GenesisEntry.Repo, a did:plc) starts from: empty, with that DID,
// so that the first commit must carry it (Apply checks a commit's DID against the
// head's) and the holder signs with it (signAtproto takes the head's DID).
func AtprotoGenesisHead(repo string) ([]byte, error) {
	if err := atproto.CheckRepoDID(repo); err != nil {
		return nil, err
	}
	return atproto.EncodeHead(atproto.Head{DID: repo})
}

// isAtproto tells an atproto envelope (a CBOR map of 10 keys) from a version-1
// commit (a map of 9) by its first byte. The apply then checks that the commit's
// format is the chain's (its genesis's).
func isAtproto(raw []byte) bool { return len(raw) > 0 && raw[0] == 0xaa }

// verifyAtproto verifies an atproto envelope under the key its chain names and returns
// its fence, its ops and the repository step the apply runs in its transaction. With
// a did, only that chain's commits verify. trees caches the repository's tree between
// commits (nil: none).
func verifyAtproto(raw []byte, did string, trees *atproto.TreeCache) (intentlog.CommitInfo, error) {
	e, err := atproto.VerifyEnvelope(raw)
	if err != nil {
		return intentlog.CommitInfo{}, err
	}
	if did != "" && e.Commit.Chain != did {
		return intentlog.CommitInfo{}, &chain.VerifyError{Reason: chain.ReasonWrongChain, Seq: e.Commit.Seq}
	}
	c := e.Commit
	return intentlog.CommitInfo{Chain: c.Chain, Seq: c.Seq, Epoch: c.Epoch, Signer: c.Signer,
		Prev: c.Prev, Ops: Intents(c.Ops), Time: c.Time, Format: chain.FormatAtproto,
		Step: func(st intentlog.FormatStore) ([]byte, []intentlog.FormatBlock, error) {
			head, err := atproto.DecodeHead(st.Head())
			if err != nil {
				return nil, nil, err
			}
			step, err := trees.Apply(storeBlocks{st}, head, e)
			if err != nil {
				return nil, nil, err
			}
			hb, err := atproto.EncodeHead(step.Head)
			if err != nil {
				return nil, nil, err
			}
			out := make([]intentlog.FormatBlock, len(step.Blocks))
			for i, b := range step.Blocks {
				out[i] = intentlog.FormatBlock{Key: b.CID, Data: b.Data}
			}
			return hb, out, nil
		}}, nil
}

// storeBlocks reads a repository's blocks from the format state.
type storeBlocks struct{ st intentlog.FormatStore }

func (s storeBlocks) Get(cid []byte) ([]byte, error) { return s.st.Block(cid), nil }
