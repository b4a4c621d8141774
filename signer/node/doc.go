// Package node is one baton device wired together: the libp2p host (transport), the
// Raft intent log (intentlog), the lease (election) and the signer loop (signer).
// Embedders use the Node directly; other processes talk to it through the local HTTP
// API that package signer/api serves over a Node.
//
//	n, err := node.Start(ctx, node.Config{DataDir: dir, PSK: psk, ChainKey: key,
//		Bootstrap: true})                       // or Join: &node.JoinConfig{Seeds, Token}
//	res, err := n.Submit(ctx, intentlog.Intent{ID: "req-1", Op: intentlog.OpPut,
//		Path: "app.post/3k", Value: v}, node.WaitSigned)
//	<-n.Lost()                                 // this device stopped holding the lease
//	err = n.Stop(ctx)                          // graceful: releases the lease first
//
// Concurrent Submit calls share Raft entries (group commit); the same intent ID again
// returns the original result. State never waits on Raft. Before claiming a lapsed
// lease, a device catches up with the leader (a read barrier forwarded to it), so a
// lagging replica does not take a lease its holder just renewed.
//
// Safety against liveness: the node and its loop only keep devices that may not sign
// from trying. The fork-freedom of the chain rests on the apply's fencing (epoch,
// holder, prev, seq, ops, signature), never on timing.
package node
