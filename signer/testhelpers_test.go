package signer

import (
	"errors"
	"testing"

	"github.com/batonhq/baton/signer/chain"
)

// testKey returns a chain key from a fixed seed (byte i = i + n), so that its bytes
// and signatures are reproducible.
func testKey(tb testing.TB, n byte) *chain.Ed25519Key {
	tb.Helper()
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i) + n
	}
	k, err := chain.NewEd25519KeyFromSeed(seed)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// failKey is a chain key whose backend always fails (an unplugged HSM).
type failKey struct{ did string }

var errHSM = errors.New("hsm unplugged")

func (f failKey) DID() string               { return f.did }
func (failKey) Sign([]byte) ([]byte, error) { return nil, errHSM }
