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
		ak, err := atproto.GenerateKey()
		if err != nil {
			return Keys{}, err
		}
		return NewAtprotoChainKeys(ak, "")
	}
	return Keys{}, fmt.Errorf("%w: format %q (want baton or atproto)", chain.ErrUnknownFormat, format)
}

// NewAtprotoChainKeys makes the keys of a new atproto chain whose chain key is k (a
// P-256 or K-256 key, made here or imported from a PDS: atproto.ImportKey) and whose
// repository DID is repo (a did:plc the user has; "": the key's did:key). A network
// key is made. The did:plc is not resolved: its DID document's #atproto key must be
// k's did:key for atproto's software to accept the commits.
func NewAtprotoChainKeys(k *atproto.Key, repo string) (Keys, error) {
	nk, err := NewChainKeys() // for the network key
	if err != nil {
		return Keys{}, err
	}
	return Keys{PSK: nk.PSK, Chain: k.DID(), AnyKey: k, Founder: true, Repo: repo}, nil
}

// saveOtherKey writes a chain key that is not Ed25519.
func saveOtherKey(path string, k chain.Key) error {
	switch k := k.(type) {
	case *atproto.Key:
		return atproto.SaveKey(path, k)
	}
	return fmt.Errorf("save chain key: %T: %w", k, chain.ErrUnsupportedKeyType)
}
