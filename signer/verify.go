package signer

import (
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// Verifier adapts chain verification to the apply: it returns an
// intentlog.CommitVerifier. With did "" it verifies each commit under the key its
// own chain field names, which is the apply's contract (the apply compares that chain
// with the genesis DID in the replicated state). With a did it accepts only commits
// of that chain; the did:key is parsed once, and if it does not parse every call fails
// with chain.ReasonBadChainKey.
func Verifier(did string) intentlog.CommitVerifier {
	verify := chain.VerifySelf
	if did != "" {
		verify = chain.Verifier(did)
	}
	trees := &atproto.TreeCache{} // this verifier's apply's last repository tree
	return func(raw []byte) (intentlog.CommitInfo, error) {
		if isAtproto(raw) {
			return verifyAtproto(raw, did, trees) // verify_format.go
		}
		c, err := verify(raw)
		if err != nil {
			return intentlog.CommitInfo{}, err
		}
		return intentlog.CommitInfo{Chain: c.Chain, Seq: c.Seq, Epoch: c.Epoch, Signer: c.Signer,
			Prev: c.Prev, Ops: Intents(c.Ops), Time: c.Time}, nil
	}
}

// Ops converts intents to the chain's ops (same fields, the chain's types).
func Ops(in []intentlog.Intent) []chain.Op {
	out := make([]chain.Op, len(in))
	for i, x := range in {
		out[i] = chain.Op{ID: x.ID, Kind: chain.Kind(x.Op), Path: x.Path, Value: x.Value}
	}
	return out
}

// Intents converts the chain's ops to intents.
func Intents(ops []chain.Op) []intentlog.Intent {
	out := make([]intentlog.Intent, len(ops))
	for i, x := range ops {
		out[i] = intentlog.Intent{ID: x.ID, Op: intentlog.Op(x.Kind), Path: x.Path, Value: x.Value}
	}
	return out
}
