package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

// Client talks to a node's local API. Errors the API answers are *APIError, which
// unwrap to this package's sentinels (errors.Is(err, node.ErrNotHolder), ...).
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client for target: a Unix socket path (e.g.
// <data>/baton.sock) or an http://host:port URL. token, if not empty, is sent as a
// bearer token.
func NewClient(target, token string) (*Client, error) {
	c := &Client{token: token}
	switch {
	case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"):
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("%w: api target %q", node.ErrBadRequest, target)
		}
		c.base = strings.TrimRight(target, "/")
		c.hc = &http.Client{}
	case target == "":
		return nil, fmt.Errorf("%w: empty api target", node.ErrBadRequest)
	default:
		sock := target
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		c.base = "http://baton"
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

func readAPIError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var ej errorJSON
	if err := json.Unmarshal(b, &ej); err != nil || ej.Error == "" {
		return &APIError{Status: resp.StatusCode, Code: CodeInternal, Message: strings.TrimSpace(string(b))}
	}
	return &APIError{Status: resp.StatusCode, Code: ej.Error, Message: ej.Message}
}

// call does a request and decodes a JSON answer into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// XRPC does a GET of the XRPC method (com.atproto.sync.getLatestCommit, say) with
// params and returns the answer's body (JSON or a CAR). An XRPC error is an
// *APIError whose Code is the error's name (RepoNotFound, ...).
func (c *Client) XRPC(ctx context.Context, method string, params url.Values) ([]byte, error) {
	path := "/xrpc/" + method
	if len(params) > 0 {
		path += "?" + params.Encode()
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	return b, nil
}

// Submit posts one intent (POST /v1/intents). With node.WaitSigned it waits for the
// commit (?wait=signed).
func (c *Client) Submit(ctx context.Context, in intentlog.Intent, wait node.Wait) (node.SubmitResult, error) {
	var op string
	switch in.Op {
	case intentlog.OpPut:
		op = "put"
	case intentlog.OpDel:
		op = "del"
	default:
		op = strconv.Itoa(int(in.Op))
	}
	path := "/v1/intents"
	if wait == node.WaitSigned {
		path += "?wait=signed"
	}
	var res node.SubmitResult
	err := c.call(ctx, http.MethodPost, path, IntentRequest{ID: in.ID, Op: op, Path: in.Path, Value: in.Value}, &res)
	return res, err
}

// State returns the node's state (GET /v1/state).
func (c *Client) State(ctx context.Context) (node.State, error) {
	var st node.State
	err := c.call(ctx, http.MethodGet, "/v1/state", nil, &st)
	return st, err
}

// Record returns the signed value at path; ok is false when there is none.
func (c *Client) Record(ctx context.Context, path string) (value []byte, ok bool, err error) {
	var r RecordJSON
	err = c.call(ctx, http.MethodGet, "/v1/records/"+escapePath(path), nil, &r)
	if errors.Is(err, node.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return r.Value, true, nil
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Records returns signed records under prefix (limit <= 0: the server's maximum).
func (c *Client) Records(ctx context.Context, prefix string, limit int) ([]intentlog.Record, error) {
	q := url.Values{"prefix": {prefix}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Records []RecordJSON `json:"records"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/records?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	recs := make([]intentlog.Record, 0, len(out.Records))
	for _, r := range out.Records {
		recs = append(recs, intentlog.Record{Path: r.Path, Value: r.Value})
	}
	return recs, nil
}

// Commits streams applied commits from fromSeq (GET /v1/commits). The channel closes
// at the end of the stream (without follow: after the head) or when ctx is done; a
// last value with Err set reports a failure. Each commit's hash is checked against
// its bytes.
func (c *Client) Commits(ctx context.Context, fromSeq uint64, follow bool) <-chan signer.AppliedCommit {
	ch := make(chan signer.AppliedCommit)
	go func() {
		defer close(ch)
		send := func(ac signer.AppliedCommit) bool {
			select {
			case ch <- ac:
				return true
			case <-ctx.Done():
				return false
			}
		}
		path := "/v1/commits?from=" + strconv.FormatUint(fromSeq, 10)
		if follow {
			path += "&follow=1"
		}
		resp, err := c.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			if ctx.Err() == nil {
				send(signer.AppliedCommit{Err: err})
			}
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			ac, err := parseCommitLine(sc.Bytes())
			if err != nil {
				send(signer.AppliedCommit{Err: err})
				return
			}
			if !send(ac) {
				return
			}
		}
		if err := sc.Err(); err != nil && ctx.Err() == nil {
			send(signer.AppliedCommit{Err: fmt.Errorf("commits stream: %w", err)})
		}
	}()
	return ch
}

func parseCommitLine(line []byte) (signer.AppliedCommit, error) {
	var probe struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(line, &probe); err == nil && probe.Error != "" {
		return signer.AppliedCommit{}, &APIError{Status: http.StatusOK, Code: probe.Error, Message: probe.Message}
	}
	var cj CommitJSON
	if err := json.Unmarshal(line, &cj); err != nil {
		return signer.AppliedCommit{}, fmt.Errorf("commits stream: %w", err)
	}
	h := chain.Hash(cj.CBOR)
	if hex.EncodeToString(h[:]) != cj.Hash {
		return signer.AppliedCommit{}, fmt.Errorf("commits stream: seq %d: hash %s does not match its bytes", cj.Seq, cj.Hash)
	}
	return signer.AppliedCommit{Seq: cj.Seq, Hash: h, Epoch: cj.Epoch, Signer: cj.Signer, Raw: cj.CBOR}, nil
}

// Release gives the node's lease up (POST /v1/lease/release).
func (c *Client) Release(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/lease/release", struct{}{}, nil)
}

// Transfer hands the node's lease to member to (POST /v1/lease/transfer).
func (c *Client) Transfer(ctx context.Context, to string) error {
	return c.call(ctx, http.MethodPost, "/v1/lease/transfer", transferRequest{To: to}, nil)
}

// HolderRelease makes the holder release the lease, wherever it is: the node does it
// if it holds, otherwise it forwards the request to the holder (POST
// /v1/lease/release {"forward": true}).
func (c *Client) HolderRelease(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/lease/release", releaseRequest{Forward: true}, nil)
}

// HolderTransfer makes the holder hand the lease to member to, wherever it is (POST
// /v1/lease/transfer {"to": to, "forward": true}).
func (c *Client) HolderTransfer(ctx context.Context, to string) error {
	return c.call(ctx, http.MethodPost, "/v1/lease/transfer", transferRequest{To: to, Forward: true}, nil)
}

// Steal takes the lease by force on the node (POST /v1/lease/steal).
func (c *Client) Steal(ctx context.Context, reason string) error {
	return c.call(ctx, http.MethodPost, "/v1/lease/steal", stealRequest{Reason: reason}, nil)
}

// LeaseHistory returns the lease history, oldest first, filtered by f (GET
// /v1/lease/history?event=&since=).
func (c *Client) LeaseHistory(ctx context.Context, f HistoryFilter) ([]LeaseEventJSON, error) {
	var out struct {
		History []LeaseEventJSON `json:"history"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/lease/history"+f.query(), nil, &out); err != nil {
		return nil, err
	}
	return out.History, nil
}

// Members returns the Raft members.
func (c *Client) Members(ctx context.Context) ([]MemberJSON, error) {
	var out struct {
		Members []MemberJSON `json:"members"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/members", nil, &out)
	return out.Members, err
}

// AddMember adds the device at addr (a /p2p/ multiaddr).
func (c *Client) AddMember(ctx context.Context, addr string, nonvoter bool) error {
	return c.call(ctx, http.MethodPost, "/v1/members", AddMemberRequest{Addr: addr, NonVoter: nonvoter}, nil)
}

// RemoveMember removes member id.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/members/"+url.PathEscape(id), nil, nil)
}

// Promote makes non-voter id a voter (POST /v1/members/{id}/promote).
func (c *Client) Promote(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/v1/members/"+url.PathEscape(id)+"/promote", nil, nil)
}

// MoveLeader hands Raft leadership to voter id (POST /v1/raft/leader).
func (c *Client) MoveLeader(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/v1/raft/leader", MoveLeaderRequest{To: id}, nil)
}

// Health checks that the node answers (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/healthz", nil, nil)
}

// ClusterHealth asks every member's health through the node (GET /v1/health/cluster).
func (c *Client) ClusterHealth(ctx context.Context) (ClusterHealth, error) {
	var h ClusterHealth
	err := c.call(ctx, http.MethodGet, "/v1/health/cluster", nil, &h)
	return h, err
}

// Relays returns the relays this device tells to crawl it and their view of it (GET
// /v1/relays).
func (c *Client) Relays(ctx context.Context) ([]RelayView, error) {
	var out struct {
		Relays []RelayView `json:"relays"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/relays", nil, &out)
	return out.Relays, err
}

// Public describes the device's public listener and its certificate (GET /v1/public).
func (c *Client) Public(ctx context.Context) (PublicView, error) {
	var v PublicView
	err := c.call(ctx, http.MethodGet, "/v1/public", nil, &v)
	return v, err
}

// Metrics returns the Prometheus text exposition (GET /metrics).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
