package transport

import "errors"

// Sentinel errors. Callers match them with errors.Is; the transport wraps them with
// context ("forward to <peer>: %w") but never changes their identity.
var (
	// ErrNoPSK means HostConfig.PSK is missing or not 32 bytes. A private network key
	// is required: baton never runs on the public libp2p network.
	ErrNoPSK = errors.New("transport: a 32-byte private network key (PSK) is required")

	// ErrUnsupportedAddr means a listen address uses a transport libp2p cannot run
	// under a private network (QUIC, WebTransport, WebRTC). libp2p would silently drop
	// it; baton refuses it instead.
	ErrUnsupportedAddr = errors.New("transport: listen address not usable with a private network key (only TCP is supported)")

	// ErrAddrInUse means a listen address is already bound, by another program or
	// another baton host (two devices must not share an address). The error names
	// the address.
	ErrAddrInUse = errors.New("transport: listen address already in use")

	// ErrCorruptIdentity means identity.key exists but cannot be decoded. The file is
	// never replaced silently: losing it changes this device's peer ID.
	ErrCorruptIdentity = errors.New("transport: corrupt identity key file")

	// ErrHandshake means TCP connected but the libp2p handshake failed or stalled:
	// most often the two devices do not share the same network key.
	ErrHandshake = errors.New("handshake failed: wrong or missing network key?")

	// ErrRefused means the handshake succeeded but the peer closed the connection at
	// once: its gater does not admit this device (not a member, no join window open).
	ErrRefused = errors.New("transport: connection refused by peer (not a member, or no join window open)")

	// ErrUnreachable means no address of the peer accepted a TCP connection.
	ErrUnreachable = errors.New("transport: peer unreachable")

	// ErrNoLeader means no leader was known (or reachable) before the caller's
	// deadline: the cluster has no quorum from this device's point of view.
	ErrNoLeader = errors.New("transport: no leader (no quorum?)")

	// ErrNoQuorum is the same error as ErrNoLeader under the other name callers use.
	ErrNoQuorum = ErrNoLeader

	// ErrNotMember means the leader (or the contacted member) refused the request
	// because this device is not a member of the cluster.
	ErrNotMember = errors.New("transport: not a member of the cluster")

	// ErrTimeout means the caller's deadline passed while a request was in flight at
	// a leader. The proposal may or may not have been committed. Errors carrying it
	// also match context.DeadlineExceeded.
	ErrTimeout = errors.New("transport: timed out waiting for the leader")

	// ErrBadToken means a join request carried no valid token, its invite was
	// already used by another device (a join window admits one device unless opened
	// with AllowJoins), or no join window was open on the contacted member.
	ErrBadToken = errors.New("transport: join refused: invalid or already used token, or no join window open")

	// ErrNotLeader is returned by the apply callback path when this node stopped being
	// the leader; forwarded proposals that hit it are retried at the new leader.
	ErrNotLeader = errors.New("transport: not the leader")

	// ErrLastVoter means Leave was asked of the only voter: the cluster would be left
	// without any voter. Add another voter first.
	ErrLastVoter = errors.New("transport: the last voter cannot leave the cluster")

	// ErrClosed means the Host, stream layer or Cluster was closed.
	ErrClosed = errors.New("transport: closed")

	// ErrTooLarge means a frame exceeded the configured maximum size.
	ErrTooLarge = errors.New("transport: frame too large")

	// ErrNoHandler means the request reached a node that has no handler for it:
	// Barrier on a leader without ClusterConfig.Barrier, Call on a member without
	// ClusterConfig.OnCall. Not retried.
	ErrNoHandler = errors.New("transport: no handler configured for this request")
)

// RemoteError is an error returned by the leader's apply callback, barrier function
// or membership change, or by the callee's OnCall handler (Cluster.Call), carried
// back to the caller as text. It is not retried.
type RemoteError struct {
	Peer string // the peer ID of the leader (or of the callee when Call is set)
	Msg  string
	// Call is set for an error returned by the callee's ClusterConfig.OnCall.
	Call bool
}

func (e *RemoteError) Error() string {
	if e.Call {
		return "peer " + e.Peer + ": " + e.Msg
	}
	return "leader " + e.Peer + ": " + e.Msg
}
