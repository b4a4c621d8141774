package sim

import (
	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/node"
)

// The signer loop's knobs (issue 19), by their names in a knob list.
var signerKnobList = []string{"skip-validation", "resign-refused", "trust-refusal", "unbounded-rev", "own-rev-clock", "max-in-flight-8"}

func (k Knobs) signerKnobNames() []string {
	var out []string
	for i, on := range []bool{k.SkipValidation, k.ResignRefused, k.TrustRefusal, k.UnboundedRev, k.OwnRevClock, k.MaxInFlight8} {
		if on {
			out = append(out, signerKnobList[i])
		}
	}
	return out
}

func (k *Knobs) setSignerKnob(name string) bool {
	switch name {
	case "skip-validation":
		k.SkipValidation = true
	case "resign-refused":
		k.ResignRefused = true
	case "trust-refusal":
		k.TrustRefusal = true
	case "unbounded-rev":
		k.UnboundedRev = true
	case "own-rev-clock":
		k.OwnRevClock = true
	case "max-in-flight-8":
		k.MaxInFlight8 = true
	default:
		return false
	}
	return true
}

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
