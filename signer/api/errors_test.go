package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

func TestCodeMapping(t *testing.T) {
	cases := []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("x: %w", node.ErrBadPath), CodeBadPath, 400},
		{fmt.Errorf("x: %w", node.ErrTooLarge), CodeTooLarge, 413},
		{intentlog.ErrEntryTooLarge, CodeTooLarge, 413},
		{election.ErrNoReason, CodeBadRequest, 400},
		{intentlog.ErrNotFound, CodeNotFound, 404},
		{fmt.Errorf("release: %w", election.ErrNotHolder), CodeNotHolder, 409},
		{&election.HeldError{}, CodeLeaseHeld, 409},
		{election.ErrLostRace, CodeLeaseHeld, 409},
		{transport.ErrLastVoter, CodeConflict, 409},
		{fmt.Errorf("%w: %w", transport.ErrNoLeader, context.DeadlineExceeded), CodeNoQuorum, 503},
		{fmt.Errorf("%w: %w", transport.ErrTimeout, context.DeadlineExceeded), CodeTimeout, 504},
		{intentlog.ErrLeadershipLost, CodeNotLeader, 503},
		{intentlog.ErrClosed, CodeStopped, 503},
		{errors.New("disk on fire"), CodeInternal, 500},
		{fmt.Errorf("add: %w", transport.ErrHandshake), CodeUnreachable, 502},
		{transport.ErrNotMember, CodeConflict, 409},
		{transport.ErrBadToken, CodeUnauthorized, 401},
		{fmt.Errorf("x: %w", node.ErrBacklog), CodeBacklog, 503},
		{fmt.Errorf("intent: %w", node.ErrBadPath), CodeBadPath, 400},
		{&APIError{Status: 409, Code: CodeNotHolder}, CodeNotHolder, 409},
	}
	for _, tc := range cases {
		code, status := Code(tc.err)
		if code != tc.code || status != tc.status {
			t.Errorf("%v: %s %d, want %s %d", tc.err, code, status, tc.code, tc.status)
		}
	}
	// Every code the API can answer unwraps to a sentinel.
	for code := range codeSentinel {
		e := &APIError{Status: http.StatusTeapot, Code: code}
		if errors.Unwrap(e) == nil {
			t.Errorf("code %s has no sentinel", code)
		}
	}
	if !errors.Is(&APIError{Code: CodeNoQuorum}, node.ErrNoQuorum) || errors.Is(&APIError{Code: "new_code"}, node.ErrInternal) {
		t.Fatal("APIError unwrap")
	}
}
