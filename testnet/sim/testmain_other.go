//go:build !go1.26 || go1.27

package sim

import "testing"

// withT: this release's testing.MainStart is not the one testmain_go126.go was
// written against (see there); `baton sim` is unavailable, `go test ./testnet/sim`
// works.
func withT(func(*testing.T)) error { return ErrNoHarness }
