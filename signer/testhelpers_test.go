package signer

import (
	"errors"

	"github.com/batonhq/baton/internal/testutil"
)

// testKey returns a reproducible chain key (testutil.Key).
var testKey = testutil.Key

// failKey is a chain key whose backend always fails (an unplugged HSM).
type failKey struct{ did string }

var errHSM = errors.New("hsm unplugged")

func (f failKey) DID() string               { return f.did }
func (failKey) Sign([]byte) ([]byte, error) { return nil, errHSM }
