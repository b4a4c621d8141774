package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
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
	CodeUnhealthy    = "unhealthy"
)

var codeSentinel = map[string]error{
	CodeBadRequest:   node.ErrBadRequest,
	CodeBadPath:      node.ErrBadPath,
	CodeTooLarge:     node.ErrTooLarge,
	CodeNotFound:     node.ErrNotFound,
	CodeNotHolder:    node.ErrNotHolder,
	CodeLeaseHeld:    node.ErrLeaseHeld,
	CodeNoQuorum:     node.ErrNoQuorum,
	CodeNotLeader:    node.ErrNotLeader,
	CodeTimeout:      node.ErrTimeout,
	CodeRejected:     node.ErrRejected,
	CodeBacklog:      node.ErrBacklog,
	CodeStopped:      node.ErrStopped,
	CodeUnauthorized: node.ErrUnauthorized,
	CodeConflict:     node.ErrConflict,
	CodeUnreachable:  node.ErrUnreachable,
	CodeInternal:     node.ErrInternal,
	CodeMethod:       node.ErrBadRequest,
	CodeUnhealthy:    node.ErrDiverged,
}

// Code returns the API error code and HTTP status for err.
func Code(err error) (code string, status int) {
	var ae *APIError
	switch {
	case err == nil:
		return "", http.StatusOK
	case errors.As(err, &ae):
		return ae.Code, ae.Status
	case errors.Is(err, node.ErrDiverged), errors.Is(err, node.ErrStorage), errors.Is(err, node.ErrIdentity), errors.Is(err, node.ErrCatchingUp),
		errors.Is(err, node.ErrClone):
		return CodeUnhealthy, http.StatusServiceUnavailable
	// no_quorum before timeout: the transport's no-leader error also wraps the
	// deadline that ended the search.
	case errors.Is(err, node.ErrBadPath):
		return CodeBadPath, http.StatusBadRequest
	case errors.Is(err, node.ErrTooLarge), errors.Is(err, intentlog.ErrEntryTooLarge), errors.Is(err, transport.ErrTooLarge):
		return CodeTooLarge, http.StatusRequestEntityTooLarge
	case errors.Is(err, node.ErrBadRequest), errors.Is(err, election.ErrNoReason), errors.Is(err, election.ErrBadTarget):
		return CodeBadRequest, http.StatusBadRequest
	case errors.Is(err, node.ErrNotFound), errors.Is(err, intentlog.ErrNotFound):
		return CodeNotFound, http.StatusNotFound
	case errors.Is(err, node.ErrNotHolder), errors.Is(err, election.ErrNotHolder):
		return CodeNotHolder, http.StatusConflict
	case errors.Is(err, node.ErrLeaseHeld), errors.Is(err, election.ErrLeaseHeld), errors.Is(err, election.ErrLostRace), errors.Is(err, election.ErrStandoff):
		return CodeLeaseHeld, http.StatusConflict
	case errors.Is(err, node.ErrBacklog):
		return CodeBacklog, http.StatusServiceUnavailable
	case errors.Is(err, node.ErrRejected), errors.Is(err, election.ErrRejected):
		return CodeRejected, http.StatusConflict
	case errors.Is(err, node.ErrConflict), errors.Is(err, transport.ErrLastVoter):
		return CodeConflict, http.StatusConflict
	case errors.Is(err, node.ErrUnauthorized), errors.Is(err, transport.ErrBadToken):
		return CodeUnauthorized, http.StatusUnauthorized
	case errors.Is(err, transport.ErrNotMember):
		return CodeConflict, http.StatusConflict
	case errors.Is(err, node.ErrNoQuorum), errors.Is(err, transport.ErrNoLeader):
		return CodeNoQuorum, http.StatusServiceUnavailable
	case errors.Is(err, node.ErrTimeout), errors.Is(err, transport.ErrTimeout), errors.Is(err, intentlog.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout, http.StatusGatewayTimeout
	case errors.Is(err, node.ErrNotLeader), errors.Is(err, transport.ErrNotLeader), errors.Is(err, intentlog.ErrNotLeader),
		errors.Is(err, raft.ErrNotLeader), errors.Is(err, intentlog.ErrLeadershipLost):
		return CodeNotLeader, http.StatusServiceUnavailable
	case errors.Is(err, node.ErrStopped), errors.Is(err, intentlog.ErrClosed), errors.Is(err, transport.ErrClosed):
		return CodeStopped, http.StatusServiceUnavailable
	case errors.Is(err, node.ErrUnreachable), errors.Is(err, transport.ErrUnreachable), errors.Is(err, transport.ErrHandshake),
		errors.Is(err, transport.ErrRefused):
		return CodeUnreachable, http.StatusBadGateway
	case errors.Is(err, context.Canceled):
		return CodeTimeout, http.StatusGatewayTimeout
	}
	return CodeInternal, http.StatusInternalServerError
}

// APIError is an error answered by the local API: the HTTP status, the stable code
// and the message. It unwraps to the sentinel of its code (node.ErrNotHolder for
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

// Message is err's text for people: the wrapping prefixes that repeat ("transfer:
// transfer: ...") or only name a package ("election: ", "node: ") are dropped, and so
// is a trailing "context deadline exceeded" that an earlier part already explains.
func Message(err error) string {
	if err == nil {
		return ""
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Message != "" {
		return cleanMessage(ae.Message)
	}
	return cleanMessage(err.Error())
}

var packagePrefixes = map[string]bool{"node": true, "election": true, "transport": true, "intentlog": true,
	"signer": true, "api": true, "raft": true}

func cleanMessage(s string) string {
	parts := strings.Split(s, ": ")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			continue
		case packagePrefixes[p] && i < len(parts)-1:
			continue
		case len(out) > 0 && out[len(out)-1] == p:
			continue
		}
		out = append(out, p)
	}
	if n := len(out); n > 1 && (out[n-1] == "context deadline exceeded" || out[n-1] == "context canceled") {
		prev := strings.Join(out[:n-1], " ")
		if strings.Contains(prev, "timed out") || strings.Contains(prev, "no leader") || strings.Contains(prev, "no quorum") || strings.Contains(prev, "timeout") {
			out = out[:n-1]
		}
	}
	return strings.Join(out, ": ")
}
