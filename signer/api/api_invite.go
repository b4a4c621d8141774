package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// Join window limits for POST /v1/join-window.
const (
	MinJoinTokenLen   = 16
	MaxJoinTokenLen   = 256
	MaxJoinWindowOpen = 7 * 24 * time.Hour
)

// JoinWindowRequest is the body of POST /v1/join-window: open a join window on this
// device until Until for devices presenting Token (base64 in JSON). A later call
// replaces the window (only the newest invite is valid).
type JoinWindowRequest struct {
	Token []byte    `json:"token"`
	Until time.Time `json:"until"`
}

// JoinWindowJSON answers POST /v1/join-window: what a new device needs besides the
// keys (the addresses to join through).
type JoinWindowJSON struct {
	ID    string    `json:"id"`
	Chain string    `json:"chain"`
	Addrs []string  `json:"addrs"`
	Until time.Time `json:"until"`
}

func (a *Server) routeInvite() {
	a.route("/v1/join-window", handlers{http.MethodPost: a.postJoinWindow})
}

func (a *Server) postJoinWindow(w http.ResponseWriter, r *http.Request) {
	var req JoinWindowRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	now := time.Now()
	switch {
	case len(req.Token) < MinJoinTokenLen || len(req.Token) > MaxJoinTokenLen:
		writeError(w, fmt.Errorf("%w: token of %d bytes, want %d to %d", node.ErrBadRequest, len(req.Token), MinJoinTokenLen, MaxJoinTokenLen))
		return
	case !req.Until.After(now):
		writeError(w, fmt.Errorf("%w: until %s is not in the future", node.ErrBadRequest, req.Until.Format(time.RFC3339)))
		return
	case req.Until.After(now.Add(MaxJoinWindowOpen)):
		writeError(w, fmt.Errorf("%w: a join window stays open %s at most", node.ErrBadRequest, MaxJoinWindowOpen))
		return
	}
	a.n.AllowJoin(req.Token, req.Until)
	a.log.Info("join window opened", "until", req.Until.Format(time.RFC3339))
	writeJSON(w, http.StatusOK, JoinWindowJSON{ID: a.n.ID(), Chain: a.n.Chain(), Addrs: a.n.Addrs(), Until: req.Until})
}

// AllowJoin opens a join window on the node (POST /v1/join-window) and returns the
// addresses to join through. `baton invite` uses it.
func (c *Client) AllowJoin(ctx context.Context, token []byte, until time.Time) (JoinWindowJSON, error) {
	var out JoinWindowJSON
	err := c.call(ctx, http.MethodPost, "/v1/join-window", JoinWindowRequest{Token: token, Until: until}, &out)
	return out, err
}
