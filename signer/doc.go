// Package signer owns baton's commit chain: the commit format (deterministic CBOR,
// did:key chain key, ed25519 signatures, verification of single commits and whole
// chains) and the signer loop that, on the device holding the lease, turns pending
// intents into signed commits.
//
// # The commit format
//
// A commit is a CBOR map in RFC 8949 core deterministic encoding with exactly the keys
// v (1), chain (did:key), seq, epoch, signer (peer ID), prev (SHA-256 of the previous
// commit's encoding, null at seq 1), ops (id, op "put"/"del", path, val for put), time
// (unix ms) and sig (ed25519 over the encoding of the map without sig). A commit's hash
// is SHA-256 of its full encoding. Decode is strict: any bytes that do not re-encode
// identically are refused (non_canonical), as are unknown or missing keys and wrong
// types. Every refusal is a *VerifyError with a stable VerifyReason.
//
// The chain key is behind the Key interface (DID + Sign) so that a hardware or remote
// key can replace the file key; verification is keyed by the did:key (ed25519 today,
// P-256 and secp256k1 recognised by multicodec and refused as unsupported).
//
// # Usage
//
//	k, err := signer.GenerateKey(nil)          // once, at init
//	err = signer.SaveKey(dataDir+"/chain.key", k) // 0600, never overwritten
//	k, err = signer.LoadKey(dataDir+"/chain.key")
//
//	raw, err := signer.Sign(k, signer.Commit{Seq: head.Seq + 1, Prev: prevHash,
//		Epoch: epoch, Signer: peerID, Ops: intents, Time: now.UnixMilli()})
//	h := signer.Hash(raw)
//
//	c, err := signer.Verify(raw, k.DID())       // one commit
//	err = signer.VerifyChain(raws, k.DID())     // a whole chain from seq 1
//	verify := signer.Verifier(k.DID())          // the apply's intentlog.CommitVerifier
//
// Match refusals with signer.ReasonOf(err) or errors.As(err, &*signer.VerifyError).
package signer
