package testnet

import (
	"bytes"
	"encoding/hex"
	"fmt"

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
// link other than prev. On an atproto chain: two commits with one rev (a relay takes
// a rev as the commit's name; the format's verification also refuses a rev that is
// not after the previous one), and two commits with one prevData among those that
// changed the repository (a commit whose intents changed nothing keeps the MST root,
// so the next one names the same prevData; a delete that takes the repository back to
// an earlier state would too: the drills' and the simulator's loads only create
// records). Baton's format has no other link.
type linkKeys struct {
	rev      map[string]uint64
	prevData map[string]uint64
}

func newLinkKeys() *linkKeys {
	return &linkKeys{rev: map[string]uint64{}, prevData: map[string]uint64{}}
}

// add books the commit raw at seq and returns what it shares with an earlier one.
func (k *linkKeys) add(f chain.Format, seq uint64, raw []byte) []string {
	if f.ID() != chain.FormatAtproto {
		return nil
	}
	e, err := atproto.DecodeEnvelope(raw)
	if err != nil {
		return nil // the format's verification reports it
	}
	return k.addAtproto(seq, e.Repo.Rev, e.PrevData, e.Repo.Data)
}

func (k *linkKeys) addAtproto(seq uint64, rev string, prevData, data []byte) []string {
	var out []string
	if first, dup := k.rev[rev]; dup {
		out = append(out, fmt.Sprintf("seq %d and seq %d share rev %s", first, seq, rev))
	} else {
		k.rev[rev] = seq
	}
	if prevData != nil && !bytes.Equal(prevData, data) {
		pk := hex.EncodeToString(prevData)
		if first, dup := k.prevData[pk]; dup {
			out = append(out, fmt.Sprintf("seq %d and seq %d share prevData %s", first, seq, abbrevHex(pk)))
		} else {
			k.prevData[pk] = seq
		}
	}
	return out
}
