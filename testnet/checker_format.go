package testnet

import (
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// FormatOf is the commit format of the chain whose key is did (signer.FormatOfDID):
// the checker and the signature audit verify, hash and chain commits through it.
// A did no format takes gives baton's (whose verification then refuses it).
func FormatOf(did string) chain.Format {
	if f, err := signer.FormatOfDID(did); err == nil {
		return f
	}
	return chain.Baton
}

// linkKeys finds, along one device's chain, two commits that name one parent by a
// link other than prev: on an atproto chain one rev or one prevData (atproto.Links).
// Baton's format has no other link.
type linkKeys struct{ at *atproto.Links }

func newLinkKeys() *linkKeys { return &linkKeys{at: atproto.NewLinks()} }

// add books the commit raw at seq and returns what it shares with an earlier one.
func (k *linkKeys) add(f chain.Format, seq uint64, raw []byte) []string {
	if f.ID() != chain.FormatAtproto {
		return nil
	}
	return k.at.Add(seq, raw)
}
