// Package device opens and creates a baton device's data directory (the keys `baton
// init` writes), decodes and encodes invites (`baton invite`), and builds the
// node.Config a device runs with, so that a Go program can do what the baton binary
// does: join a cluster with an invite, or start a device that was initialized by the
// binary.
//
// # Usage
//
// Join a cluster with an invite printed by `baton invite` on a running device (the
// data dir is initialized from the invite; if the join fails, everything written is
// removed again):
//
//	inv, err := device.ParseInvite(text)
//	n, err := device.Join(ctx, dir, inv, device.JoinOptions{
//		Adjust: func(c *node.Config) { c.ListenAddrs = []string{"/ip4/0.0.0.0/tcp/7420"} },
//	})
//	defer n.Stop(context.Background())
//
// Start a device initialized earlier (by `baton init` or Create):
//
//	d, err := device.Open(dir)
//	cfg := d.Config() // DataDir, PSK, Chain, ChainKey, Bootstrap on a founder's first start
//	n, err := node.Start(ctx, cfg)
//
// Both are compiled as ExampleJoin and ExampleOpen (example_test.go): copy from there.
//
// # Files
//
// Create writes identity.key (the device's libp2p key: its peer ID), network.key (the
// private network key, swarm key format), chain.key (the chain key; absent on a
// replica that never signs) and device.json (the chain's did:key, whether this device
// founded the cluster and so bootstraps on its first run, and whether it was made with
// the chain key), device.json last: its presence means the directory is complete.
// Open refuses (ErrMissingKey, with what to do) a data dir with a Raft log whose
// identity.key is gone (a new one would be a stranger on that log) and a device made
// with the chain key whose chain.key is gone (it would silently stop signing); a
// device made without it is a replica (Device.Replica), which baton run says at start. Keys are never overwritten. The node adds
// members.json, raft.db, state.db, snapshots/ and chain.genesis; the binary adds
// baton.sock, api.token and baton.lock. A device that left its cluster gets a
// removed.json marker (MarkRemoved); Open reports it in Device.Removed.
package device
