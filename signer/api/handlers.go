package api

// The /v1 routes: their wire shapes, the router and every handler of the API (the
// listeners, the token and the server's life are api.go's; the XRPC methods
// xrpc*.go's).

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/signer/node"
)

// IntentRequest is the body of POST /v1/intents. Value is base64 in JSON.
type IntentRequest struct {
	ID    string `json:"id"`
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value []byte `json:"value,omitempty"`
}

// RecordJSON is one record in API answers. Value is base64 in JSON.
type RecordJSON struct {
	Path  string `json:"path"`
	Value []byte `json:"value"`
}

// CommitJSON is one NDJSON line of GET /v1/commits.
type CommitJSON struct {
	Seq    uint64 `json:"seq"`
	Hash   string `json:"hash"`
	Epoch  uint64 `json:"epoch"`
	Signer string `json:"signer"`
	CBOR   []byte `json:"cbor"` // base64 of the full encoding
}

// LeaseEventJSON is one line of the lease history.
type LeaseEventJSON struct {
	Index  uint64 `json:"index"`
	Event  string `json:"event"`
	Holder string `json:"holder"`
	Epoch  uint64 `json:"epoch"`
	// TS is the event's own time (unix ms), absent for a release, whose entry carries
	// none; LeaseTS is the lease record's ts after the event (for a release: the last
	// renewal's).
	TS      int64  `json:"ts,omitempty"`
	LeaseTS int64  `json:"lease_ts"`
	Prior   string `json:"prior,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// MemberJSON is one Raft member in API answers.
type MemberJSON struct {
	ID     string   `json:"id"`
	Voter  bool     `json:"voter"`
	Leader bool     `json:"leader"`
	Addrs  []string `json:"addrs,omitempty"`
}

// AddMemberRequest is the body of POST /v1/members.
type AddMemberRequest struct {
	Addr     string `json:"addr"`
	NonVoter bool   `json:"nonvoter,omitempty"`
}

type transferRequest struct {
	To string `json:"to"`
	// Forward: when this device does not hold the lease, ask the holder (at the epoch
	// this device sees) instead of answering not_holder.
	Forward bool `json:"forward,omitempty"`
}

type releaseRequest struct {
	Forward bool `json:"forward,omitempty"`
}

type stealRequest struct {
	Reason string `json:"reason"`
}

type errorJSON struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

type handlers map[string]http.HandlerFunc

func (a *Server) route(pattern string, hs handlers) {
	a.routeQ(pattern, hs, false)
}

// routeQ registers hs for pattern on the API's router (routeOn).
func (a *Server) routeQ(pattern string, hs handlers, withQuery bool) {
	routeOn(a.mux, pattern, hs, withQuery)
}

// routeOn registers hs for pattern on mux; unless withQuery, a request with query
// parameters is refused (the handlers of such endpoints check theirs with query).
func routeOn(mux *http.ServeMux, pattern string, hs handlers, withQuery bool) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if !withQuery && r.URL.RawQuery != "" {
			if _, err := query(r); err != nil {
				writeError(w, err)
				return
			}
		}
		h, ok := hs[r.Method]
		if !ok && r.Method == http.MethodHead {
			h, ok = hs[http.MethodGet]
		}
		if !ok {
			var allow []string
			for m := range hs {
				allow = append(allow, m)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, errorJSON{Error: CodeMethod, Message: r.Method + " not allowed on " + r.URL.Path})
			return
		}
		h(w, r)
	})
}

func (a *Server) routes() {
	a.routeQ("/v1/intents", handlers{http.MethodPost: a.postIntent}, true)
	a.route("/v1/state", handlers{http.MethodGet: a.getState})
	a.routeQ("/v1/records", handlers{http.MethodGet: a.getRecords}, true)
	a.route("/v1/records/{path...}", handlers{http.MethodGet: a.getRecord})
	a.routeQ("/v1/commits", handlers{http.MethodGet: a.getCommits}, true)
	a.route("/v1/lease/release", handlers{http.MethodPost: a.postRelease})
	a.route("/v1/lease/transfer", handlers{http.MethodPost: a.postTransfer})
	a.route("/v1/lease/steal", handlers{http.MethodPost: a.postSteal})
	a.routeQ("/v1/lease/history", handlers{http.MethodGet: a.getHistory}, true)
	a.routeOps() // api_ops.go
	a.route("/v1/members", handlers{http.MethodGet: a.getMembers, http.MethodPost: a.postMember})
	a.route("/v1/members/{id}", handlers{http.MethodDelete: a.deleteMember})
	a.route("/v1/members/{id}/promote", handlers{http.MethodPost: a.postPromote})
	a.route("/v1/raft/leader", handlers{http.MethodPost: a.postMoveLeader})
	a.route("/healthz", handlers{http.MethodGet: a.getHealth})
	a.routeInvite()    // POST /v1/join-window (api_invite.go)
	a.routeXRPC(a.mux) // /xrpc/: an atproto chain's repository (xrpc.go, xrpc_stream.go)
	metrics := promhttp.HandlerFor(a.n.Registry(), promhttp.HandlerOpts{})
	a.routeQ("/metrics", handlers{http.MethodGet: metrics.ServeHTTP}, true)
	a.mux.HandleFunc("/", notFound)
	// The public listener: the same read-only /xrpc/ methods, nothing else.
	a.routeXRPC(a.pub)
	a.pub.HandleFunc("/", notFound)
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, fmt.Errorf("%w: no endpoint %s", node.ErrNotFound, r.URL.Path))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code, status := Code(err)
	writeJSON(w, status, errorJSON{Error: code, Message: Message(err)})
}

// decodeBody reads a bounded JSON body into v: unknown fields, duplicate keys, case
// variants of field names (strictKeys), trailing data and oversized bodies are
// refused. An empty body is allowed when emptyOK.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body over %d bytes", node.ErrTooLarge, MaxRequestBody)
		}
		return fmt.Errorf("%w: read body: %v", node.ErrBadRequest, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if emptyOK {
			return nil
		}
		return fmt.Errorf("%w: empty body", node.ErrBadRequest)
	}
	if !utf8.Valid(body) {
		// encoding/json would replace invalid bytes by U+FFFD, so two distinct ids
		// could collide: refuse instead.
		return fmt.Errorf("%w: the body is not valid UTF-8", node.ErrBadRequest)
	}
	if err := strictKeys(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, v)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", node.ErrBadRequest)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON object", node.ErrBadRequest)
	}
	return nil
}

func apiCtx(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

// intentShape follows an intent's validation error: what each field of a submit takes
// (README, "The sidecar API").
const intentShape = `a submit is {"id": a string unique per intent, its idempotency key (the same id again answers the first result); ` +
	`"op": "put" or "del"; "path": "namespace/key"; "value": for put, the bytes in standard base64}`

func parseOp(s string) (intentlog.Op, error) {
	switch s {
	case "put":
		return intentlog.OpPut, nil
	case "del":
		return intentlog.OpDel, nil
	}
	return 0, fmt.Errorf("%w: field \"op\" is %q: must be put or del", node.ErrBadRequest, s)
}

// decodeIntent reads POST /v1/intents: the wait parameter and the body, validated as
// the apply would (ValidateIntent). Every error maps to a 4xx.
func decodeIntent(w http.ResponseWriter, r *http.Request) (intentlog.Intent, node.Wait, time.Duration, error) {
	var wait node.Wait
	qs, err := query(r, "wait", "timeout")
	if err != nil {
		return intentlog.Intent{}, 0, 0, err
	}
	timeout := node.DefaultSubmitTimeout
	if q := qs.Get("timeout"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil || d <= 0 || d > node.DefaultSubmitTimeout {
			return intentlog.Intent{}, 0, 0, fmt.Errorf("%w: timeout=%q: a Go duration above 0 and at most %s (the default), e.g. 5s",
				node.ErrBadRequest, q, node.DefaultSubmitTimeout)
		}
		timeout = d
	}
	switch q := qs.Get("wait"); q {
	case "", "committed":
	case "signed":
		wait = node.WaitSigned
	default:
		return intentlog.Intent{}, 0, 0, fmt.Errorf("%w: wait=%q: must be committed or signed", node.ErrBadRequest, q)
	}
	var req IntentRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		return intentlog.Intent{}, 0, 0, err
	}
	op, err := parseOp(req.Op)
	if err != nil {
		return intentlog.Intent{}, 0, 0, fmt.Errorf("%w (%s)", err, intentShape)
	}
	in := intentlog.Intent{ID: req.ID, Op: op, Path: req.Path, Value: req.Value}
	if err := node.ValidateIntent(&in); err != nil {
		return intentlog.Intent{}, 0, 0, fmt.Errorf("%w (%s)", err, intentShape)
	}
	return in, wait, timeout, nil
}

func (a *Server) postIntent(w http.ResponseWriter, r *http.Request) {
	stages.Mark(stages.APIStart, 0, 0, 0)
	in, wait, timeout, err := decodeIntent(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	stages.Mark(stages.APIDecoded, 0, 0, 0)
	if err := a.n.QuorumLost(); err != nil {
		writeError(w, fmt.Errorf("%w; nothing was submitted: submit again when the quorum is back", err))
		return
	}
	ctx, cancel := apiCtx(r, timeout)
	defer cancel()
	res, err := a.n.Submit(ctx, in, wait)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusAccepted
	if wait == node.WaitSigned {
		status = http.StatusOK
	}
	stages.Mark(stages.APIAnswered, 0, 0, 0)
	writeJSON(w, status, res)
}

func (a *Server) getState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.n.State())
}

func (a *Server) getRecord(w http.ResponseWriter, r *http.Request) {
	path := r.PathValue("path")
	v, ok, err := a.n.Record(path)
	switch {
	case err != nil:
		writeError(w, err)
	case !ok:
		writeError(w, fmt.Errorf("%w: no record %q", node.ErrNotFound, path))
	default:
		writeJSON(w, http.StatusOK, RecordJSON{Path: path, Value: v})
	}
}

func (a *Server) getRecords(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "prefix", "limit")
	if err != nil {
		writeError(w, err)
		return
	}
	limit := MaxRecordsLimit
	if s := q.Get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil || l <= 0 {
			writeError(w, fmt.Errorf("%w: limit %q", node.ErrBadRequest, s))
			return
		}
		limit = min(l, MaxRecordsLimit)
	}
	prefix := q.Get("prefix")
	if len(prefix) > intentlog.MaxPathLen {
		writeError(w, fmt.Errorf("%w: prefix longer than %d bytes", node.ErrTooLarge, intentlog.MaxPathLen))
		return
	}
	recs, err := a.n.Records(prefix, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]RecordJSON, 0, len(recs))
	for _, rec := range recs {
		out = append(out, RecordJSON{Path: rec.Path, Value: rec.Value})
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": out})
}

func (a *Server) getCommits(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "from", "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	var from uint64
	if s := q.Get("from"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, fmt.Errorf("%w: from %q", node.ErrBadRequest, s))
			return
		}
		from = v
	}
	follow := false
	switch s := q.Get("follow"); s {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		writeError(w, fmt.Errorf("%w: follow %q", node.ErrBadRequest, s))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(a.base, cancel)()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	for c := range a.n.Commits(ctx, from, follow) {
		_ = rc.SetWriteDeadline(time.Now().Add(writeSlice))
		if c.Err != nil {
			_ = enc.Encode(errorJSON{Error: CodeInternal, Message: c.Err.Error()})
			return
		}
		if err := enc.Encode(CommitJSON{Seq: c.Seq, Hash: hex.EncodeToString(c.Hash[:]), Epoch: c.Epoch,
			Signer: c.Signer, CBOR: c.Raw}); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func (a *Server) leaseAnswer(w http.ResponseWriter, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lease": a.n.State().Lease})
}

func (a *Server) postRelease(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if err := decodeBody(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if req.Forward {
		a.leaseAnswer(w, a.n.HolderRelease(ctx))
		return
	}
	a.leaseAnswer(w, a.n.Release(ctx))
}

func (a *Server) postTransfer(w http.ResponseWriter, r *http.Request) {
	var req transferRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if req.Forward {
		a.leaseAnswer(w, a.n.HolderTransfer(ctx, req.To))
		return
	}
	a.leaseAnswer(w, a.n.Transfer(ctx, req.To))
}

func (a *Server) postSteal(w http.ResponseWriter, r *http.Request) {
	var req stealRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	a.leaseAnswer(w, a.n.Steal(ctx, req.Reason))
}

func (a *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	f, err := parseHistoryFilter(r)
	if err != nil {
		writeError(w, err)
		return
	}
	hist, err := a.n.LeaseHistory()
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]LeaseEventJSON, 0, len(hist))
	for _, e := range hist {
		if j := leaseEventJSON(e); f.keep(j) {
			out = append(out, j)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"history": out})
}

func (a *Server) getMembers(w http.ResponseWriter, r *http.Request) {
	ms, err := a.n.Members()
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]MemberJSON, 0, len(ms))
	for _, m := range ms {
		mj := MemberJSON{ID: m.ID.String(), Voter: m.Suffrage == raft.Voter, Leader: m.Leader}
		for _, ad := range m.Addrs {
			mj.Addrs = append(mj.Addrs, ad.String())
		}
		out = append(out, mj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"members": out, "removed": a.n.RemovedMembers()})
}

func (a *Server) postMember(w http.ResponseWriter, r *http.Request) {
	var req AddMemberRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.AddMember(ctx, req.Addr, req.NonVoter); err != nil {
		writeError(w, err)
		return
	}
	a.getMembers(w, r)
}

func (a *Server) deleteMember(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.RemoveMember(ctx, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("id")})
}

func (a *Server) postPromote(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.Promote(ctx, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	a.getMembers(w, r)
}

// MoveLeaderRequest is the body of POST /v1/raft/leader.
type MoveLeaderRequest struct {
	To string `json:"to"` // the voter to lead Raft
}

func (a *Server) postMoveLeader(w http.ResponseWriter, r *http.Request) {
	var req MoveLeaderRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	if req.To == "" {
		writeError(w, fmt.Errorf("%w: field \"to\" (the voter to lead Raft) is required", node.ErrBadRequest))
		return
	}
	ctx, cancel := apiCtx(r, DefaultAPITimeout)
	defer cancel()
	if err := a.n.MoveLeader(ctx, req.To); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"leader": req.To})
}

func (a *Server) getHealth(w http.ResponseWriter, r *http.Request) {
	if a.base.Err() != nil {
		writeError(w, node.ErrStopped)
		return
	}
	if err := a.n.Health(); err != nil {
		writeError(w, err)
		return
	}
	ans := map[string]any{"ok": true, "id": a.n.ID()}
	if err := a.n.Defect(); err != nil {
		// Signing goes on; a fault of baton itself to report (see node.State.Defect).
		ans["defect"] = err.Error()
	}
	writeJSON(w, http.StatusOK, ans)
}
