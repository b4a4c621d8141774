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
//
// # The signer loop
//
// Loop runs on every device. Its lease tick calls RenewOrClaim every Tick (sooner when
// the lease policy's next deadline comes first), each write bounded by CallTimeout <
// Tick. Its signer does not wait for the tick: it wakes on every applied change (the
// log's Watch), and whenever this device holds the lease, the local replica shows the
// hold, and intents are pending, it signs the oldest ones (up to MaxBatchCount /
// MaxBatchBytes) on the applied head and proposes the commit; it keeps going while
// intents arrive. Holds is checked right before signing and right before proposing.
// A commit refused with epoch_mismatch or not_holder ends signing at that epoch for
// good. A hold under which no commit applied for a whole TTL while intents waited (a
// failing key, say) is released rather than renewed. A graceful stop releases.
//
//	lp, err := signer.NewLoop(signer.LoopConfig{
//		Self: peerID, Key: chainKey, Lease: lease, Log: log, // log: local reads, forwarding Propose
//		Logger: logger,
//	})
//	go lp.Run(ctx) // returns after ctx is done, having released a held lease
//
//	// Publish only applied commits:
//	err = signer.FollowCommits(ctx, log, fromSeq, func(c signer.AppliedCommit) error { ... })
//
// # The node and its local API
//
// Node wires one device together: the libp2p host (transport), the Raft intent log
// (intentlog), the lease (election) and the signer loop, plus the local HTTP API on
// <data>/baton.sock (mode 0600; optional TCP, loopback unless a bearer token is set).
// Embedders use the Node directly; other processes use Client over the socket.
//
//	n, err := signer.Start(ctx, signer.Config{DataDir: dir, PSK: psk, ChainKey: key,
//		Bootstrap: true})                       // or Join: &signer.JoinConfig{Seeds, Token}
//	res, err := n.Submit(ctx, intentlog.Intent{ID: "req-1", Op: intentlog.OpPut,
//		Path: "app.post/3k", Value: v}, signer.WaitSigned)
//	<-n.Lost()                                 // this device stopped holding the lease
//	err = n.Stop(ctx)                          // graceful: releases the lease first
//
//	c, err := signer.NewClient(dir+"/baton.sock", "") // or "http://127.0.0.1:7421", token
//	st, err := c.State(ctx)                    // answers in ms, even without quorum
//
// Concurrent Submit calls share Raft entries (group commit); the same intent ID again
// returns the original result. State never waits on Raft. Before claiming a lapsed
// lease, a device catches up with the leader (a read barrier forwarded to it), so a
// lagging replica does not take a lease its holder just renewed. API errors are
// {"error": CODE, "message": text}; the client returns *APIError, which unwraps to
// this package's sentinels (ErrNotHolder, ErrNoQuorum, ...).
//
// Safety against liveness: the loop only keeps devices that may not sign from trying.
// The fork-freedom of the chain rests on the apply's fencing (epoch, holder, prev,
// seq, oldest pending ops, signature), never on the loop's timing.
package signer
