package node

import (
	"errors"
)

// Errors of the Node. The local API (package api) gives each a stable code that it
// returns as {"error": CODE, "message": text}; its Go client's *APIError unwraps to
// the sentinel of its code, so callers match with errors.Is on either side.
var (
	// ErrBadRequest: malformed JSON, unknown fields, a missing or invalid field.
	ErrBadRequest = errors.New("node: bad request")
	// ErrBadPath: a record path that is not collection/rkey (or is reserved).
	ErrBadPath = errors.New("node: bad record path")
	// ErrTooLarge: a request body, id or value over its limit.
	ErrTooLarge = errors.New("node: too large")
	// ErrNotFound: no such record, commit, member or endpoint.
	ErrNotFound = errors.New("node: not found")
	// ErrNotHolder: a release or transfer found no holder (the lease is free), or the
	// holder it was forwarded to had moved on to another epoch or device.
	ErrNotHolder = errors.New("node: this device does not hold the lease")
	// ErrLeaseHeld: the lease is held by another device (a claim or steal lost).
	ErrLeaseHeld = errors.New("node: lease held by another device")
	// ErrNoQuorum: no Raft leader could be reached (no quorum?) before the deadline.
	ErrNoQuorum = errors.New("node: no quorum (no raft leader reachable)")
	// ErrNotLeader: the operation needs the Raft leader and it moved.
	ErrNotLeader = errors.New("node: not the raft leader")
	// ErrTimeout: the deadline passed; the operation may still take effect later
	// (resubmit with the same intent ID to learn its outcome).
	ErrTimeout = errors.New("node: timed out")
	// ErrRejected: the state machine refused the intent (Reason in the message).
	ErrRejected = errors.New("node: rejected by the state machine")
	// ErrBacklog: too many intents wait to be signed (the chain is not moving: no
	// holder, or a slow one); retry later with the same intent ID.
	ErrBacklog = errors.New("node: backlog full, retry later")
	// ErrStopped: the Node was stopped or killed.
	ErrStopped = errors.New("node: node stopped")
	// ErrUnauthorized: the TCP API needs a bearer token and none or a wrong one came.
	ErrUnauthorized = errors.New("node: unauthorized")
	// ErrSocketInUse: another live node serves the API socket.
	ErrSocketInUse = errors.New("node: api socket in use by another process")
	// ErrConflict: the request conflicts with the cluster state (e.g. a transfer to a
	// device that is not a member, the last voter leaving).
	ErrConflict = errors.New("node: conflict")
	// ErrUnreachable: a peer the operation needs could not be reached (wrong address,
	// or a handshake failure: wrong or missing network key?).
	ErrUnreachable = errors.New("node: peer unreachable")
	// ErrBadConfig: Start was given an invalid Config.
	ErrBadConfig = errors.New("node: invalid config")
	// ErrUnsupported: the operation needs libp2p membership and the node was built
	// by New (a simulated network).
	ErrUnsupported = errors.New("node: not supported by this node's network")
	// ErrIdentity: this device's chain key or chain does not match the cluster's
	// genesis, or its key already belongs to another history (see IdentityError).
	ErrIdentity = errors.New("node: chain identity mismatch")
	// ErrDiverged: this replica's applied state differs from the others' (see
	// DivergedError); it does not claim or sign until repaired.
	ErrDiverged = errors.New("node: replica diverged")
	// ErrStorage: this replica cannot read or write its storage (a corrupt file, a
	// full disk); intentlog's FaultError says which file and index.
	ErrStorage = errors.New("node: storage fault")
	// ErrCatchingUp: this device lost Raft state it had (a repair, a lost raft.db, a
	// restored older copy) and neither votes, campaigns, claims nor signs until it has
	// caught up with the cluster (State.Rejoin says how far it is).
	ErrCatchingUp = errors.New("node: catching up after lost Raft state")
	// ErrClone: another process runs with this device's identity and started
	// earlier; this one signs nothing and must stop (Node.Cloned).
	ErrClone = errors.New("node: another process runs with this device's identity")
	// ErrInternal: anything else.
	ErrInternal = errors.New("node: internal error")
)
