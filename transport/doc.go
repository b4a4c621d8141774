// Package transport connects baton devices: a libp2p host per device (persistent
// ed25519 identity, TCP with Noise and yamux, a private network pre-shared key, a
// connection gater that admits only Raft members and joining devices, a persistent
// member address book), a Raft transport over libp2p streams, and a Cluster that
// forwards proposals and membership changes to the Raft leader.
//
// The Raft server ID and server address of a device are both its libp2p peer ID
// string. transport treats log entries and apply results as opaque bytes and imports
// no other baton package.
//
// # Usage
//
// Create the network key once and give it to every device (a file in the standard
// swarm key format):
//
//	psk, err := transport.GeneratePSK()
//	err = transport.WritePSKFile(path, psk) // later: psk, err = transport.ReadPSKFile(path)
//
// On every start, open the host, build Raft on its transport, then the Cluster. apply
// runs on the leader: raft.Apply(entry) and the FSM's response as bytes, returning
// raft's not-leader errors unchanged (see ApplyFunc). A listen address already in use
// (by another program, or another device's host) fails NewHost with ErrAddrInUse.
//
//	host, err := transport.NewHost(transport.HostConfig{DataDir: dir, PSK: psk,
//		ListenAddrs: []string{"/ip4/0.0.0.0/tcp/7420", "/ip6/::/tcp/7420"}})
//	trans, err := host.RaftTransport(transport.RaftTransportConfig{})
//	cfg.LocalID = raft.ServerID(host.ID().String())
//	r, err := raft.NewRaft(cfg, fsm, logs, stable, snaps, trans)
//	cluster, err := transport.NewCluster(host, r, apply, transport.ClusterConfig{
//		Barrier: barrier, // leader: raft.Barrier, then the applied index
//		OnCall:  onCall,  // requests addressed to this device by Call
//	})
//
// The first device, on its first start only, bootstraps:
//
//	err = cluster.Bootstrap()
//
// To add a device, a member opens a join window and hands the new device its
// addresses and the token out of band (an invite); the new device starts as above
// (without Bootstrap) and joins. An invite adds one device (AllowJoins: n):
//
//	member.AllowJoin(token, time.Now().Add(10*time.Minute)) // on the member
//	seeds := []peer.AddrInfo{memberInfo}                      // e.g. from member.AddrInfo()
//	err = cluster.Join(ctx, seeds, token, false)              // on the new device
//
// Any member proposes; a follower forwards to the leader and returns the leader's
// result. Give ctx a deadline (ProposeTimeout applies otherwise); it is never
// exceeded:
//
//	result, err := cluster.Propose(ctx, entry)
//
// A read barrier (the leader's applied index after a Raft barrier; wait until the
// local FSM has applied it, then read), with the same forwarding and retries:
//
//	index, err := cluster.Barrier(ctx)
//
// One request to one chosen member (not the leader), answered by its OnCall; a
// single attempt, bounded by ctx, for a callee that may hang:
//
//	result, err := cluster.Call(ctx, holder, payload)
//
// What each member looks like from here (connected, last heard from, stalled):
//
//	peers, err := cluster.Peers()
//
// Leave, or remove another device:
//
//	err = cluster.Leave(ctx)
//	err = cluster.Remove(ctx, id)
//
// Shut down in this order (raft.Shutdown closes the stream layer, not the host):
//
//	cluster.Close(); r.Shutdown().Error(); host.Close()
//
// raft.Shutdown ends every Raft stream as it starts (the Cluster watches for it), so
// it returns promptly even when a peer hangs with its connection open.
//
// # Security
//
// Only devices holding the PSK complete the handshake; a dial to a peer with another
// key fails within HostConfig.DialTimeout with ErrHandshake ("handshake failed: wrong
// or missing network key?"). Inbound connections are admitted only from members (the
// address book, kept equal to the Raft configuration), peers explicitly allowed with
// AllowPeer (a joining device allows the members it was given), and, while a join
// window is open, any peer with the key; refusals are logged with the peer ID. Raft
// and forwarding streams (proposals, barriers, calls) are served to members only; a
// peer admitted through a join window is served only JoinProtocol, whose requests
// must carry the window's token (compared in constant time) and may only ask to add
// the requesting peer itself. A window admits one device (AllowJoins: n): the first
// successful join spends it, so a replayed invite gets ErrBadToken.
// QUIC, WebTransport and WebRTC listen addresses are refused (ErrUnsupportedAddr)
// because libp2p silently drops them under a private network. There is no NAT
// service (UPnP) and no mDNS. Every member is a circuit relay for members, devices
// keep reservations on the members they reach directly, and DCUtR replaces a relayed
// connection by a hole-punched one where the NATs allow it (TCP with reuseport; a
// port in use is still refused). A member's join window is announced to its relays
// (RelayWindowProtocol) so that a device it invited reaches it through them (relay.go,
// relaywindow.go, docs/DESIGN.md).
//
// # Membership
//
// The Raft configuration is the source of truth. The Cluster re-reads it on every
// peer or leader observation, after each local membership change and every
// ClusterConfig.SyncInterval, and updates the gater and the address book
// (members.json in the data dir, written atomically; addresses are added to the
// peerstore with a permanent TTL and refreshed when a member identifies with new
// listen addresses). Removed members are refused at once; their open connections are
// closed one to two sync intervals later, so the reply to a Leave still reaches the
// leaving device. Joins are serialised through the leader, which records and admits
// the joiner before AddVoter so that replication to it starts at once.
//
// # Safety and liveness
//
// Propose may return ErrTimeout after the leader committed the entry, and retries an
// entry after raft.ErrLeadershipLost (which may also have committed it) and when the
// leader it forwarded the entry to stops being the leader as seen by the local Raft
// (a leader that hangs with its connections open, as under SIGSTOP, never answers and
// never closes the stream; the retry goes to the new leader within about a heartbeat
// timeout): entries must be idempotent. baton's are (intent IDs dedupe; lease
// entries compare-and-set; a commit is fenced by epoch and prev hash). Block/Unblock
// exist for fault injection (partitions in tests and drills) and are not needed in
// normal operation; they close connections, so they do not show a hung peer (the
// tests freeze one behind a TCP proxy instead).
//
// All exported methods of Host and Cluster are safe for concurrent use.
package transport
