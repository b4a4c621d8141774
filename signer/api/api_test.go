package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

// rawHTTP is an HTTP client over a node's Unix socket, for requests the Go client
// would never send.
func rawHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: 15 * time.Second}
}

func doRaw(t *testing.T, hc *http.Client, method, path, body string) (int, errorJSON, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ej errorJSON
	_ = json.Unmarshal(b, &ej)
	return resp.StatusCode, ej, b
}

// fingerprint is everything a bad request must leave unchanged (the applied index
// moves with lease renewals, so it is not in it).
type fingerprint struct {
	head       uint64
	pending    int
	records    int
	rejections map[intentlog.Reason]uint64
	members    int
}

func fingerprintOf(t *testing.T, n *served) fingerprint {
	t.Helper()
	recs, err := n.Records("", 0)
	if err != nil {
		t.Fatal(err)
	}
	st := n.State()
	return fingerprint{head: st.Head.Seq, pending: st.Pending, records: len(recs),
		rejections: n.Log().Rejections(), members: st.Members}
}

func otherPeerID(t *testing.T) string {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

const testToken = "test-token-0123456789abcdef"

// TestAPI exercises every endpoint of the local API on a single-device cluster over
// its Unix socket, with the Go client and with raw requests.
func TestAPI(t *testing.T) {
	cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 3))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{})
	testutil.WaitFor(t, 10*time.Second, "the single node holds", n.Holds)
	c, err := NewClient(n.APISocket(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hc := rawHTTP(n.APISocket())
	ctx := context.Background()
	T := t

	t.Run("socket_mode_0600", func(t *testing.T) {
		fi, err := os.Stat(n.APISocket())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("socket mode %v", fi.Mode())
		}
	})

	t.Run("health_and_metrics", func(t *testing.T) {
		if err := c.Health(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"baton_lease_held 1", "baton_raft_state{role=\"leader\"} 1", "baton_lease_writes_total{kind=\"claim\"}", "baton_intent_signed_seconds_bucket"} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})

	var first node.SubmitResult
	t.Run("submit_and_read", func(t *testing.T) {
		res, err := c.Submit(ctx, testutil.Put("a-1"), node.WaitCommitted)
		if err != nil || res.ID != "a-1" || res.Index == 0 {
			t.Fatalf("submit: %+v %v", res, err)
		}
		// Raw: 202 with {id,index}.
		code, _, body := doRaw(t, hc, "POST", "/v1/intents", `{"id":"a-2","op":"put","path":"app.test/a-2","value":"`+base64.StdEncoding.EncodeToString([]byte("two"))+`"}`)
		if code != http.StatusAccepted || !strings.Contains(string(body), `"index"`) {
			t.Fatalf("raw submit: %d %s", code, body)
		}
		first, err = c.Submit(ctx, testutil.Put("a-3"), node.WaitSigned)
		if err != nil || first.Seq == 0 || len(first.Hash) != 64 {
			t.Fatalf("submit signed: %+v %v", first, err)
		}
		code, _, body = doRaw(t, hc, "POST", "/v1/intents?wait=signed", `{"id":"a-4","op":"del","path":"app.test/a-2"}`)
		if code != http.StatusOK || !strings.Contains(string(body), `"seq"`) || !strings.Contains(string(body), `"hash"`) {
			t.Fatalf("raw submit signed: %d %s", code, body)
		}
		v, ok, err := c.Record(ctx, "app.test/a-3")
		if err != nil || !ok || string(v) != "v-a-3" {
			t.Fatalf("record: %q %v %v", v, ok, err)
		}
		if _, ok, err := c.Record(ctx, "app.test/a-2"); err != nil || ok {
			t.Fatalf("deleted record: %v %v", ok, err)
		}
		if _, ok, err := c.Record(ctx, "app.test/none"); err != nil || ok {
			t.Fatalf("missing record: %v %v", ok, err)
		}
		recs, err := c.Records(ctx, "app.test/", 0)
		if err != nil || len(recs) != 2 || recs[0].Path != "app.test/a-1" || recs[1].Path != "app.test/a-3" {
			t.Fatalf("records: %+v %v", recs, err)
		}
		recs, err = c.Records(ctx, "app.test/", 1)
		if err != nil || len(recs) != 1 {
			t.Fatalf("records limit 1: %+v %v", recs, err)
		}
	})

	t.Run("latency_histogram", func(t *testing.T) {
		// a-1..a-4 were submitted here and are signed (a-3, a-4 waited for it).
		testutil.WaitFor(t, 5*time.Second, "latency samples", func() bool {
			m, err := c.Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(m, "\n") {
				if v, ok := strings.CutPrefix(line, "baton_intent_signed_seconds_count "); ok {
					return v == "4"
				}
			}
			return false
		})
	})

	t.Run("duplicate_returns_original", func(t *testing.T) {
		again, err := c.Submit(ctx, intentlog.Intent{ID: "a-3", Op: intentlog.OpPut, Path: "app.test/other", Value: []byte("x")}, node.WaitCommitted)
		if err != nil || !again.Duplicate || again.Index != first.Index || again.Seq != first.Seq || again.Hash != first.Hash {
			t.Fatalf("duplicate: %+v %v, first %+v", again, err, first)
		}
		if _, ok, _ := n.Record("app.test/other"); ok {
			t.Fatal("a duplicate id wrote its own value")
		}
	})

	t.Run("state", func(t *testing.T) {
		st, err := c.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.ID != n.ID() || st.Chain != n.Chain() || !st.Lease.HeldByMe || st.Lease.Holder != n.ID() ||
			st.Raft.Role != "Leader" || st.Head.Seq == 0 || len(st.Head.Hash) != 64 || st.Members != 1 || st.Lease.TTLMs != time.Second.Milliseconds() {
			t.Fatalf("state %+v", st)
		}
	})

	t.Run("commits", func(t *testing.T) {
		var got []signer.AppliedCommit
		for ac := range c.Commits(ctx, 1, false) {
			if ac.Err != nil {
				t.Fatal(ac.Err)
			}
			got = append(got, ac)
		}
		head := n.State().Head.Seq
		if uint64(len(got)) != head {
			t.Fatalf("%d commits, head %d", len(got), head)
		}
		raws := make([][]byte, len(got))
		for i, ac := range got {
			raws[i] = ac.Raw
		}
		if err := chain.VerifyChain(raws, n.Chain()); err != nil {
			t.Fatal(err)
		}
		// from= skips, follow streams what comes next.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ch := c.Commits(fctx, head, true)
		if ac := <-ch; ac.Err != nil || ac.Seq != head {
			t.Fatalf("follow first: %+v", ac)
		}
		res, err := c.Submit(ctx, testutil.Put("follow-1"), node.WaitCommitted)
		if err != nil {
			t.Fatal(err)
		}
		ac := <-ch
		if ac.Err != nil || ac.Seq != head+1 {
			t.Fatalf("follow next: %+v (%+v)", ac, res)
		}
		cm, err := chain.Decode(ac.Raw)
		if err != nil || len(cm.Ops) != 1 || cm.Ops[0].ID != "follow-1" {
			t.Fatalf("followed commit: %+v %v", cm, err)
		}
		if hex.EncodeToString(ac.Hash[:]) == "" {
			t.Fatal("no hash")
		}
	})

	t.Run("history_and_members", func(t *testing.T) {
		hist, err := c.LeaseHistory(ctx, HistoryFilter{})
		if err != nil || len(hist) == 0 || hist[0].Event != "claim" || hist[0].Holder != n.ID() {
			t.Fatalf("history: %+v %v", hist, err)
		}
		ms, err := c.Members(ctx)
		if err != nil || len(ms) != 1 || ms[0].ID != n.ID() || !ms[0].Voter || !ms[0].Leader {
			t.Fatalf("members: %+v %v", ms, err)
		}
	})

	t.Run("bad_requests_change_nothing", func(t *testing.T) {
		big := base64.StdEncoding.EncodeToString(make([]byte, intentlog.MaxValueLen+1))
		huge := strings.Repeat("a", MaxRequestBody+10)
		nonMember := otherPeerID(t)
		cases := []struct {
			name, method, path, body string
			status                   int
			code                     string
		}{
			{"malformed_json", "POST", "/v1/intents", `{"id":"x1","op":"put",`, 400, CodeBadRequest},
			{"empty_body", "POST", "/v1/intents", ``, 400, CodeBadRequest},
			{"unknown_field", "POST", "/v1/intents", `{"id":"x2","op":"put","path":"app.test/x","value":"","extra":1}`, 400, CodeBadRequest},
			{"trailing_data", "POST", "/v1/intents", `{"id":"x3","op":"put","path":"app.test/x"} {}`, 400, CodeBadRequest},
			{"bad_path_no_slash", "POST", "/v1/intents", `{"id":"x4","op":"put","path":"noslash","value":""}`, 400, CodeBadPath},
			{"bad_path_reserved", "POST", "/v1/intents", `{"id":"x5","op":"put","path":"__lease__","value":""}`, 400, CodeBadPath},
			{"bad_path_space", "POST", "/v1/intents", `{"id":"x6","op":"put","path":"app.test/a b","value":""}`, 400, CodeBadPath},
			{"oversized_value", "POST", "/v1/intents", `{"id":"x7","op":"put","path":"app.test/x","value":"` + big + `"}`, 413, CodeTooLarge},
			{"oversized_body", "POST", "/v1/intents", `{"id":"x8","op":"put","path":"app.test/x","value":"` + huge + `"}`, 413, CodeTooLarge},
			{"long_id", "POST", "/v1/intents", `{"id":"` + strings.Repeat("i", intentlog.MaxIDLen+1) + `","op":"put","path":"app.test/x"}`, 413, CodeTooLarge},
			{"bad_base64", "POST", "/v1/intents", `{"id":"x9","op":"put","path":"app.test/x","value":"@@@not base64"}`, 400, CodeBadRequest},
			{"missing_id", "POST", "/v1/intents", `{"op":"put","path":"app.test/x","value":""}`, 400, CodeBadRequest},
			{"bad_op", "POST", "/v1/intents", `{"id":"x10","op":"upsert","path":"app.test/x","value":""}`, 400, CodeBadRequest},
			{"del_with_value", "POST", "/v1/intents", `{"id":"x11","op":"del","path":"app.test/a-1","value":"eA=="}`, 400, CodeBadRequest},
			{"bad_wait", "POST", "/v1/intents?wait=forever", `{"id":"x12","op":"put","path":"app.test/x"}`, 400, CodeBadRequest},
			{"wrong_type", "POST", "/v1/intents", `{"id":12,"op":"put","path":"app.test/x"}`, 400, CodeBadRequest},
			{"steal_without_reason", "POST", "/v1/lease/steal", `{}`, 400, CodeBadRequest},
			{"steal_empty_reason", "POST", "/v1/lease/steal", `{"reason":""}`, 400, CodeBadRequest},
			{"steal_unknown_field", "POST", "/v1/lease/steal", `{"reason":"x","force":true}`, 400, CodeBadRequest},
			{"transfer_to_non_member", "POST", "/v1/lease/transfer", `{"to":"` + nonMember + `"}`, 409, CodeConflict},
			{"transfer_to_garbage", "POST", "/v1/lease/transfer", `{"to":"not-a-peer-id"}`, 400, CodeBadRequest},
			{"transfer_without_target", "POST", "/v1/lease/transfer", `{}`, 400, CodeBadRequest},
			{"release_with_body_garbage", "POST", "/v1/lease/release", `{"now":1}`, 400, CodeBadRequest},
			{"record_bad_path", "GET", "/v1/records/noslash", ``, 400, CodeBadPath},
			{"record_missing", "GET", "/v1/records/app.test/none", ``, 404, CodeNotFound},
			{"records_bad_limit", "GET", "/v1/records?limit=-1", ``, 400, CodeBadRequest},
			{"commits_bad_from", "GET", "/v1/commits?from=abc", ``, 400, CodeBadRequest},
			{"commits_bad_follow", "GET", "/v1/commits?follow=maybe", ``, 400, CodeBadRequest},
			{"add_member_bad_addr", "POST", "/v1/members", `{"addr":"/ip4/1.2.3.4/tcp/1"}`, 400, CodeBadRequest},
			{"add_member_unknown_field", "POST", "/v1/members", `{"addr":"x","role":"boss"}`, 400, CodeBadRequest},
			{"remove_member_garbage", "DELETE", "/v1/members/garbage", ``, 400, CodeBadRequest},
			{"remove_non_member", "DELETE", "/v1/members/" + nonMember, ``, 404, CodeNotFound},
			{"unknown_endpoint", "GET", "/v1/nothing", ``, 404, CodeNotFound},
			{"wrong_method", "GET", "/v1/intents", ``, 405, CodeMethod},
			{"wrong_method_state", "POST", "/v1/state", `{}`, 405, CodeMethod},
		}
		before := fingerprintOf(t, n)
		holdsBefore := n.Holds()
		for _, tc := range cases {
			status, ej, body := doRaw(t, hc, tc.method, tc.path, tc.body)
			if status != tc.status || ej.Error != tc.code || ej.Message == "" {
				t.Errorf("%s: got %d %s (%s), want %d %s", tc.name, status, ej.Error, trim(body), tc.status, tc.code)
			}
		}
		after := fingerprintOf(t, n)
		// The device's own lease writes may be refused as stale_rev meanwhile on a
		// loaded machine (a renewal sent again after its call timed out, behind the
		// first copy that applied: 1 of 4 -race runs beside busy loops at load ~7);
		// no request above reaches the log (each is answered with its error, checked
		// above), so only the other reasons are compared.
		own := func(m map[intentlog.Reason]uint64) map[intentlog.Reason]uint64 {
			m = maps.Clone(m)
			delete(m, intentlog.ReasonStaleRev)
			return m
		}
		if before.head != after.head || before.pending != after.pending || before.records != after.records ||
			before.members != after.members || !maps.Equal(own(before.rejections), own(after.rejections)) {
			t.Fatalf("bad requests changed the state: %+v -> %+v", before, after)
		}
		if holdsBefore != n.Holds() {
			t.Fatal("bad requests changed the hold")
		}
		for i := 1; i <= 12; i++ {
			if _, ok, _ := n.Log().IntentStatus(fmt.Sprintf("x%d", i)); ok {
				t.Fatalf("bad intent x%d was accepted", i)
			}
		}
	})

	t.Run("client_typed_errors", func(t *testing.T) {
		_, err := c.Submit(ctx, intentlog.Intent{ID: "y", Op: intentlog.OpPut, Path: "bad"}, node.WaitCommitted)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != CodeBadPath || ae.Status != 400 || !errors.Is(err, node.ErrBadPath) {
			t.Fatalf("client error: %#v", err)
		}
		if err := c.Transfer(ctx, otherPeerID(t)); !errors.Is(err, node.ErrConflict) {
			t.Fatalf("transfer to non-member: %v", err)
		}
		if err := c.Steal(ctx, ""); !errors.Is(err, node.ErrBadRequest) {
			t.Fatalf("steal without reason: %v", err)
		}
	})

	t.Run("steal_and_release", func(t *testing.T) {
		epoch := n.State().Lease.Epoch
		if err := c.Steal(ctx, "drill: operator override"); err != nil {
			t.Fatal(err)
		}
		st := n.State()
		if st.Lease.Epoch != epoch+1 || st.Lease.Holder != n.ID() {
			t.Fatalf("after steal: %+v", st.Lease)
		}
		hist, _ := c.LeaseHistory(ctx, HistoryFilter{})
		last := hist[len(hist)-1]
		if last.Event != "steal" || last.Reason != "drill: operator override" {
			t.Fatalf("steal in history: %+v", last)
		}
		testutil.WaitFor(t, 5*time.Second, "hold after steal", n.Holds)
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n.Holds() {
			t.Fatal("holds after release")
		}
		if err := c.Release(ctx); !errors.Is(err, node.ErrNotHolder) {
			t.Fatalf("second release: %v", err)
		}
		// Alone, the device claims again after its stand-off (one TTL).
		testutil.WaitFor(t, 4*time.Second, "reclaim after standoff", n.Holds)
		if _, err := c.Submit(ctx, testutil.Put("after-release"), node.WaitSigned); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("socket_in_use_and_stale", func(t *testing.T) {
		if _, err := Start(n.Node, Config{Socket: n.APISocket()}); !errors.Is(err, node.ErrSocketInUse) {
			t.Fatalf("second server on a live socket: %v", err)
		}
		// A stale socket file (its process gone) is replaced.
		stale := filepath.Join(t.TempDir(), SocketFile)
		ln, err := net.Listen("unix", stale)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		if _, err := os.Stat(stale); err != nil {
			t.Fatalf("stale socket not left behind: %v", err)
		}
		srv, err := Start(n.Node, Config{Socket: stale})
		if err != nil {
			t.Fatalf("stale socket not replaced: %v", err)
		}
		srv.Close(nil)
	})

	t.Run("tcp", func(t *testing.T) {
		for _, bad := range []Config{{Addr: "127.0.0.1:0"}, {Addr: "0.0.0.0:0"}, {Addr: "127.0.0.1:0", Token: "short"}, {Addr: "nonsense", Token: testToken}} {
			if _, err := Start(n.Node, bad); !errors.Is(err, node.ErrBadConfig) {
				t.Fatalf("TCP api %+v: %v", bad, err)
			}
		}
		srv, err := Start(n.Node, Config{Addr: "127.0.0.1:0", Token: testToken})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close(nil)
		if srv.Socket() != "" {
			t.Fatal("no socket asked for but served")
		}
		noTok, _ := NewClient("http://"+srv.Addr(), "")
		if err := noTok.Health(ctx); !errors.Is(err, node.ErrUnauthorized) {
			t.Fatalf("without token: %v", err)
		}
		wrong, _ := NewClient("http://"+srv.Addr(), "wrong-token-0123456789")
		if _, err := wrong.State(ctx); !errors.Is(err, node.ErrUnauthorized) {
			t.Fatalf("wrong token: %v", err)
		}
		good, _ := NewClient("http://"+srv.Addr()+"/", testToken)
		if err := good.Health(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := NewClient("", ""); !errors.Is(err, node.ErrBadRequest) {
			t.Fatalf("empty target: %v", err)
		}
		if _, err := NewClient("http://", ""); !errors.Is(err, node.ErrBadRequest) {
			t.Fatalf("bad url: %v", err)
		}
	})

	t.Run("tcp_unauthenticated_body_never_read", func(t *testing.T) {
		srv, err := Start(n.Node, Config{Addr: "127.0.0.1:0", Token: testToken})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close(nil)
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Headers announce a large body; none of it is sent. The 401 must come at
		// once and the connection close, not wait to drain the body.
		fmt.Fprintf(c, "POST /v1/intents HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading the answer: %v (the server waited for the body)", err)
		}
		if !bytes.HasPrefix(resp, []byte("HTTP/1.1 401")) || !bytes.Contains(resp, []byte(`"unauthorized"`)) {
			t.Fatalf("answer %q", resp)
		}
	})

	t.Run("tcp_connection_limit_spares_the_socket", func(t *testing.T) {
		srv, err := Start(n.Node, Config{Addr: "127.0.0.1:0", Token: testToken, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close(nil)
		var conns []net.Conn
		for range 20 { // idle connections that never send a request
			c, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		// The Unix socket still answers at once.
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := c.Health(sctx); err != nil {
			t.Fatalf("socket with the TCP listener full: %v", err)
		}
	})

	t.Run("strict_queries_and_paths", func(t *testing.T) {
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/v1/intents?wait=%zz", `{"id":"q1","op":"put","path":"app.test/q1","value":"eA=="}`},
			{"POST", "/v1/intents?wiat=signed", `{"id":"q2","op":"put","path":"app.test/q2","value":"eA=="}`},
			{"POST", "/v1/intents?wait=signed&wait=committed", `{"id":"q3","op":"put","path":"app.test/q3","value":"eA=="}`},
			{"GET", "/v1/state?verbose=1", ""},
			{"GET", "/v1/commits?from=1&tail=1", ""},
			{"GET", "/v1/records?prefix=a&sort=desc", ""},
			{"GET", "/v1/records/app.test/../app.test/a-1", ""},
			{"GET", "/v1/records/app.test/./a-1", ""},
			{"GET", "/v1//state", ""},
			{"GET", "/v1/records/app.test%2fa-1", ""},
			{"POST", "/v1/intents", "{\"id\":\"bad\xff\",\"op\":\"put\",\"path\":\"app.test/x\",\"value\":\"eA==\"}"},
		} {
			before := fingerprintOf(t, n)
			code, ej, body := doRaw(t, hc, tc.method, tc.path, tc.body)
			if code != 400 || (ej.Error != CodeBadRequest && ej.Error != CodeBadPath) {
				t.Errorf("%s %s: %d %s", tc.method, tc.path, code, body)
			}
			if after := fingerprintOf(t, n); !reflect.DeepEqual(before, after) {
				t.Errorf("%s %s changed the state", tc.method, tc.path)
			}
		}
	})

	t.Run("stop_with_open_follower", func(t *testing.T) {
		cfg := nodeConfig(t, t.TempDir(), testutil.PSK(t), testutil.Key(t, 3))
		cfg.Bootstrap = true
		sn := startServed(T, cfg, Config{})
		sc, _ := NewClient(sn.APISocket(), "")
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ch := sc.Commits(fctx, 1, true)
		if _, err := sn.Submit(ctx, testutil.Put("s-1"), node.WaitSigned); err != nil {
			t.Fatal(err)
		}
		if ac := <-ch; ac.Err != nil || ac.Seq != 1 {
			t.Fatalf("follow: %+v", ac)
		}
		start := time.Now()
		sn.srv.Close(ctx)
		if err := sn.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		for range ch { // the stream ends
		}
		t.Logf("Close and Stop with an open follower: %s", took.Round(time.Millisecond))
		if took > 900*time.Millisecond {
			t.Errorf("Close and Stop took %v with an open /v1/commits follower", took)
		}
		if _, err := os.Stat(sn.APISocket()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left after Close: %v", err)
		}
	})

	t.Run("handler", func(t *testing.T) {
		// The handler serves the same API for embedders.
		rec := &recorder{h: http.Header{}}
		req, _ := http.NewRequest("GET", "/healthz", nil)
		n.srv.Handler().ServeHTTP(rec, req)
		if rec.code != 200 || !bytes.Contains(rec.body.Bytes(), []byte(`"ok":true`)) {
			t.Fatalf("handler: %d %s", rec.code, rec.body.String())
		}
	})
}

type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(c int)           { r.code = c }

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
