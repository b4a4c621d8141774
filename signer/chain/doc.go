// Package chain is baton's commit format: the signed, hash-linked commits that make
// up the chain, their canonical CBOR encoding (RFC 8949 core deterministic), the
// chain key (an ed25519 did:key behind the Key signing interface) and verification of
// single commits and whole chains.
//
// It imports nothing of libp2p, Raft, bbolt or Prometheus: a program that only wants
// to check an exported chain needs this package alone.
//
// # Usage
//
// Sign a commit with the chain key, then verify it and the chain it extends:
//
//	k, err := chain.GenerateKey(nil)
//	raw, err := chain.Sign(k, chain.Commit{Seq: 1, Epoch: 1, Signer: peerID,
//		Ops: []chain.Op{{ID: "req-1", Kind: chain.Put, Path: "app.post/3k", Value: v}},
//		Time: time.Now().UnixMilli()})
//	c, err := chain.Verify(raw, k.DID())
//	err = chain.VerifyChain(raws, k.DID()) // links, seqs, epochs, signatures
//
// Errors carry a stable reason (ReasonOf): non_canonical, bad_signature, bad_prev, ...
package chain
