package device

import (
	"fmt"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// NewChainKeysFormat makes the keys of a new chain of the commit format named format:
// "baton" (an Ed25519 chain key, NewChainKeys) or "atproto" (a P-256 chain key: the
// repository's #atproto signing key, did:key zDn...; the genesis then declares the
// atproto format).
func NewChainKeysFormat(format string) (Keys, error) {
	switch format {
	case "", "baton":
		return NewChainKeys()
	case "atproto":
		k, err := NewChainKeys() // for the network key
		if err != nil {
			return Keys{}, err
		}
		ak, err := atproto.GenerateKey()
		if err != nil {
			return Keys{}, err
		}
		return Keys{PSK: k.PSK, Chain: ak.DID(), AnyKey: ak, Founder: true}, nil
	}
	return Keys{}, fmt.Errorf("%w: format %q (want baton or atproto)", chain.ErrUnknownFormat, format)
}

// saveOtherKey writes a chain key that is not Ed25519.
func saveOtherKey(path string, k chain.Key) error {
	switch k := k.(type) {
	case *atproto.Key:
		return atproto.SaveKey(path, k)
	}
	return fmt.Errorf("save chain key: %T: %w", k, chain.ErrUnsupportedKeyType)
}
