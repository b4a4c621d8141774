package chain

import (
	"fmt"
	"testing"
)

// testKey returns a chain key from a fixed seed (byte i = i + n), so that its bytes
// and signatures are reproducible.
func testKey(tb testing.TB, n byte) *Ed25519Key {
	tb.Helper()
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i) + n
	}
	k, err := NewEd25519KeyFromSeed(seed)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// testOps returns n intents, alternating put and del.
func testOps(seq uint64, n int) []Op {
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = Op{ID: fmt.Sprintf("id-%d-%d", seq, i), Kind: Put, Path: fmt.Sprintf("app.test/r%d", i), Value: []byte(fmt.Sprintf("value %d/%d", seq, i))}
		if i%2 == 1 {
			ops[i].Kind, ops[i].Value = Del, nil
		}
	}
	return ops
}

// buildChain signs len(epochs) linked commits, commit i under epochs[i].
func buildChain(tb testing.TB, k Key, epochs ...uint64) [][]byte {
	tb.Helper()
	var raws [][]byte
	var prev []byte
	for i, ep := range epochs {
		seq := uint64(i + 1)
		raw, err := Sign(k, Commit{Seq: seq, Epoch: ep, Signer: "12D3KooWtest", Prev: prev, Ops: testOps(seq, 3), Time: 1_700_000_000_000 + int64(i)})
		if err != nil {
			tb.Fatal(err)
		}
		h := Hash(raw)
		prev = h[:]
		raws = append(raws, raw)
	}
	return raws
}
