package sim

import (
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/node"
)

func applySignerKnobs(k Knobs, cfg *node.Config) {
	if !k.SkipValidation && !k.ResignRefused && !k.TrustRefusal && !k.UnboundedRev && !k.OwnRevClock && !k.MaxInFlight8 {
		return
	}
	cfg.Knobs.Signer = &knobs.Signer{SkipValidation: k.SkipValidation, ResignRefused: k.ResignRefused, TrustRefusal: k.TrustRefusal,
		UnboundedRev: k.UnboundedRev, OwnRevClock: k.OwnRevClock}
	if k.MaxInFlight8 {
		cfg.Knobs.Signer.MaxInFlight = k.maxInFlight()
	}
}

// maxInFlight is the signer's pipeline depth in a run with these knobs.
func (k Knobs) maxInFlight() int {
	if k.MaxInFlight8 {
		return 8 // the default before issue 23
	}
	return signer.DefaultMaxInFlight
}
