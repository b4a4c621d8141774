package signer

import (
	"context"
	"errors"
	"net/http"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/transport"
	"github.com/hashicorp/raft"
)

// Errors of the Node and its local API. Each has a stable code (Code) that the API
// returns as {"error": CODE, "message": text}; the Go client's *APIError unwraps to
// the sentinel of its code, so callers match with errors.Is on either side.
var (
	// ErrBadRequest: malformed JSON, unknown fields, a missing or invalid field.
	ErrBadRequest = errors.New("signer: bad request")
	// ErrBadPath: a record path that is not collection/rkey (or is reserved).
	ErrBadPath = errors.New("signer: bad record path")
	// ErrTooLarge: a request body, id or value over its limit.
	ErrTooLarge = errors.New("signer: too large")
	// ErrNotFound: no such record, commit, member or endpoint.
	ErrNotFound = errors.New("signer: not found")
	// ErrNotHolder: a release or transfer was asked of a device that does not hold
	// the lease.
	ErrNotHolder = errors.New("signer: this device does not hold the lease")
	// ErrLeaseHeld: the lease is held by another device (a claim or steal lost).
	ErrLeaseHeld = errors.New("signer: lease held by another device")
	// ErrNoQuorum: no Raft leader could be reached (no quorum?) before the deadline.
	ErrNoQuorum = errors.New("signer: no quorum (no raft leader reachable)")
	// ErrNotLeader: the operation needs the Raft leader and it moved.
	ErrNotLeader = errors.New("signer: not the raft leader")
	// ErrTimeout: the deadline passed; the operation may still take effect later
	// (resubmit with the same intent ID to learn its outcome).
	ErrTimeout = errors.New("signer: timed out")
	// ErrRejected: the state machine refused the intent (Reason in the message).
	ErrRejected = errors.New("signer: rejected by the state machine")
	// ErrBacklog: too many intents wait to be signed (the chain is not moving: no
	// holder, or a slow one); retry later with the same intent ID.
	ErrBacklog = errors.New("signer: backlog full, retry later")
	// ErrStopped: the Node was stopped or killed.
	ErrStopped = errors.New("signer: node stopped")
	// ErrUnauthorized: the TCP API needs a bearer token and none or a wrong one came.
	ErrUnauthorized = errors.New("signer: unauthorized")
	// ErrSocketInUse: another live node serves the API socket.
	ErrSocketInUse = errors.New("signer: api socket in use by another process")
	// ErrConflict: the request conflicts with the cluster state (e.g. a transfer to a
	// device that is not a member, the last voter leaving).
	ErrConflict = errors.New("signer: conflict")
	// ErrUnreachable: a peer the operation needs could not be reached (wrong address,
	// or a handshake failure: wrong or missing network key?).
	ErrUnreachable = errors.New("signer: peer unreachable")
	// ErrInternal: anything else.
	ErrInternal = errors.New("signer: internal error")
)

// API error codes (the "error" field).
const (
	CodeBadRequest   = "bad_request"
	CodeBadPath      = "bad_path"
	CodeTooLarge     = "too_large"
	CodeNotFound     = "not_found"
	CodeNotHolder    = "not_holder"
	CodeLeaseHeld    = "lease_held"
	CodeNoQuorum     = "no_quorum"
	CodeNotLeader    = "not_leader"
	CodeTimeout      = "timeout"
	CodeRejected     = "rejected"
	CodeBacklog      = "backlog"
	CodeStopped      = "stopped"
	CodeUnauthorized = "unauthorized"
	CodeConflict     = "conflict"
	CodeUnreachable  = "unreachable"
	CodeInternal     = "internal"
	CodeMethod       = "method_not_allowed"
)

var codeSentinel = map[string]error{
	CodeBadRequest:   ErrBadRequest,
	CodeBadPath:      ErrBadPath,
	CodeTooLarge:     ErrTooLarge,
	CodeNotFound:     ErrNotFound,
	CodeNotHolder:    ErrNotHolder,
	CodeLeaseHeld:    ErrLeaseHeld,
	CodeNoQuorum:     ErrNoQuorum,
	CodeNotLeader:    ErrNotLeader,
	CodeTimeout:      ErrTimeout,
	CodeRejected:     ErrRejected,
	CodeBacklog:      ErrBacklog,
	CodeStopped:      ErrStopped,
	CodeUnauthorized: ErrUnauthorized,
	CodeConflict:     ErrConflict,
	CodeUnreachable:  ErrUnreachable,
	CodeInternal:     ErrInternal,
	CodeMethod:       ErrBadRequest,
}

// Code returns the API error code and HTTP status for err.
func Code(err error) (code string, status int) {
	var ae *APIError
	switch {
	case err == nil:
		return "", http.StatusOK
	case errors.As(err, &ae):
		return ae.Code, ae.Status
	// no_quorum before timeout: the transport's no-leader error also wraps the
	// deadline that ended the search.
	case errors.Is(err, ErrBadPath):
		return CodeBadPath, http.StatusBadRequest
	case errors.Is(err, ErrTooLarge), errors.Is(err, intentlog.ErrEntryTooLarge), errors.Is(err, transport.ErrTooLarge):
		return CodeTooLarge, http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBadRequest), errors.Is(err, election.ErrNoReason), errors.Is(err, election.ErrBadTarget):
		return CodeBadRequest, http.StatusBadRequest
	case errors.Is(err, ErrNotFound), errors.Is(err, intentlog.ErrNotFound):
		return CodeNotFound, http.StatusNotFound
	case errors.Is(err, ErrNotHolder), errors.Is(err, election.ErrNotHolder):
		return CodeNotHolder, http.StatusConflict
	case errors.Is(err, ErrLeaseHeld), errors.Is(err, election.ErrLeaseHeld), errors.Is(err, election.ErrLostRace), errors.Is(err, election.ErrStandoff):
		return CodeLeaseHeld, http.StatusConflict
	case errors.Is(err, ErrBacklog):
		return CodeBacklog, http.StatusServiceUnavailable
	case errors.Is(err, ErrRejected), errors.Is(err, election.ErrRejected):
		return CodeRejected, http.StatusConflict
	case errors.Is(err, ErrConflict), errors.Is(err, transport.ErrLastVoter):
		return CodeConflict, http.StatusConflict
	case errors.Is(err, ErrUnauthorized), errors.Is(err, transport.ErrBadToken):
		return CodeUnauthorized, http.StatusUnauthorized
	case errors.Is(err, transport.ErrNotMember):
		return CodeConflict, http.StatusConflict
	case errors.Is(err, ErrNoQuorum), errors.Is(err, transport.ErrNoLeader):
		return CodeNoQuorum, http.StatusServiceUnavailable
	case errors.Is(err, ErrTimeout), errors.Is(err, transport.ErrTimeout), errors.Is(err, intentlog.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout, http.StatusGatewayTimeout
	case errors.Is(err, ErrNotLeader), errors.Is(err, transport.ErrNotLeader), errors.Is(err, intentlog.ErrNotLeader),
		errors.Is(err, raft.ErrNotLeader), errors.Is(err, intentlog.ErrLeadershipLost):
		return CodeNotLeader, http.StatusServiceUnavailable
	case errors.Is(err, ErrStopped), errors.Is(err, intentlog.ErrClosed), errors.Is(err, transport.ErrClosed):
		return CodeStopped, http.StatusServiceUnavailable
	case errors.Is(err, ErrUnreachable), errors.Is(err, transport.ErrUnreachable), errors.Is(err, transport.ErrHandshake),
		errors.Is(err, transport.ErrRefused):
		return CodeUnreachable, http.StatusBadGateway
	case errors.Is(err, context.Canceled):
		return CodeTimeout, http.StatusGatewayTimeout
	}
	return CodeInternal, http.StatusInternalServerError
}

// APIError is an error answered by the local API: the HTTP status, the stable code
// and the message. It unwraps to the sentinel of its code (ErrNotHolder for
// "not_holder", ...).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the sentinel of e's code (nil for an unknown code).
func (e *APIError) Unwrap() error { return codeSentinel[e.Code] }
