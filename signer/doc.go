// Package signer is the signer loop: on the device holding the lease it turns intents
// into signed commits of the chain (format in package signer/chain), continuing from
// the applied head; on every device it runs the lease tick (renew, claim). It also
// follows applied commits for publishing (FollowCommits, Commits) and adapts chain
// verification to the apply (Verifier).
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
// Safety against liveness: the loop only keeps devices that may not sign from trying.
// The fork-freedom of the chain rests on the apply's fencing (epoch, holder, prev,
// seq, oldest pending ops, signature), never on the loop's timing.
package signer
