package node

import (
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
)

// ReadFormat reads the locally applied format state (an atproto chain's repository):
// the signer loop signs an atproto commit on top of it.
func (p *proposer) ReadFormat(fn func(intentlog.FormatStore) error) error {
	return p.log.ReadFormat(fn)
}

// genesisVersion is the commit format a new chain declares: its chain key's
// (atproto for a P-256 did:key, baton's own otherwise).
func genesisVersion(did string) uint64 {
	if f, err := signer.ChainFormatOfDID(did); err == nil {
		return f
	}
	return intentlog.CommitFormatVersion
}
