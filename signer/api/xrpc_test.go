package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/bluesky-social/indigo/events"
	"github.com/bluesky-social/indigo/events/schedulers/sequential"
	"github.com/fxamacker/cbor/v2"
	"github.com/gorilla/websocket"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

// atRecord is a DAG-CBOR app.bsky.feed.post record with text.
func atRecord(t testing.TB, text string) []byte {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	v, err := em.Marshal(map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2026-12-02T02:00:00.000Z"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// atSubmit submits an intent on n and waits until it is signed.
func atSubmit(t testing.TB, n *served, in intentlog.Intent) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := n.Submit(ctx, in, node.WaitSigned)
	if err != nil || res.Seq == 0 {
		t.Fatalf("submit %s: %+v %v", in.ID, res, err)
	}
	return res.Seq
}

// dialStream opens subscribeRepos on a node's socket with the query q.
func dialStream(sock, q string) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock)
		}}
	return d.Dial("ws://baton/xrpc/com.atproto.sync.subscribeRepos"+q, nil)
}

// readFrames reads n binary messages.
func readFrames(t *testing.T, c *websocket.Conn, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for range n {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		mt, b, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("frame %d of %d: %v", len(out)+1, n, err)
		}
		if mt != websocket.BinaryMessage {
			t.Fatalf("frame %d: message type %d", len(out)+1, mt)
		}
		out = append(out, b)
	}
	return out
}

// checkCommits has indigo check #commit events in order from seq first: each is
// VerifyCommitMessage's, its CAR slice loads and its commit verifies under the chain
// key, since/prevData are the previous event's rev and data.
func checkCommits(t *testing.T, pub atcrypto.PublicKey, first int64, evs []*events.XRPCStreamEvent) {
	t.Helper()
	ctx := context.Background()
	var lastRev string
	var lastData []byte
	for i, xev := range evs {
		msg := xev.RepoCommit
		if msg == nil {
			t.Fatalf("event %d is not a #commit: %+v", i, xev)
		}
		if msg.Seq != first+int64(i) {
			t.Fatalf("event %d: seq %d, want %d", i, msg.Seq, first+int64(i))
		}
		if _, err := repo.VerifyCommitMessage(ctx, msg); err != nil {
			t.Fatalf("seq %d: indigo VerifyCommitMessage: %v", msg.Seq, err)
		}
		ic, _, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(msg.Blocks))
		if err != nil {
			t.Fatalf("seq %d: indigo LoadRepoFromCAR: %v", msg.Seq, err)
		}
		if err := ic.VerifySignature(pub); err != nil {
			t.Fatalf("seq %d: indigo VerifySignature: %v", msg.Seq, err)
		}
		if i > 0 {
			var pd []byte
			if msg.PrevData != nil {
				pd = cid.Cid(*msg.PrevData).Bytes()
			}
			if msg.Since == nil || *msg.Since != lastRev || !bytes.Equal(pd, lastData) {
				t.Fatalf("seq %d: since/prevData are not seq %d's rev and data", msg.Seq, msg.Seq-1)
			}
		}
		lastRev, lastData = msg.Rev, ic.Data.Bytes()
	}
}

func parseFrames(t *testing.T, frames [][]byte) []*events.XRPCStreamEvent {
	t.Helper()
	var out []*events.XRPCStreamEvent
	for i, f := range frames {
		var xev events.XRPCStreamEvent
		if err := xev.Deserialize(bytes.NewReader(f)); err != nil {
			t.Fatalf("frame %d: indigo cannot read it: %v", i, err)
		}
		out = append(out, &xev)
	}
	return out
}

// xrpcGet does a GET on the socket and returns the status, the XRPC error and the body.
func xrpcGet(t *testing.T, sock, path string) (int, errorJSON, []byte) {
	t.Helper()
	return doRaw(t, rawHTTP(sock), http.MethodGet, path, "")
}

// TestXRPCAtproto serves an atproto chain from two real nodes (the holder and a
// follower, over libp2p) and reads it with indigo's own code: subscribeRepos from
// cursor 0 and from a middle cursor gives byte-identical frames on both replicas, each
// read by indigo's stream consumer (events.HandleRepoStream) and checked
// (VerifyCommitMessage, the CAR slice's signature, since/prevData chaining), then a
// live commit arrives on the open stream; a future cursor gets a FutureCursor error
// frame. getRecord (sync) proves every record against the head commit in indigo,
// repo.getRecord's JSON reads back in indigo to the record's bytes, getRepo loads in
// indigo with every record, getLatestCommit is the head; both replicas answer the
// same; errors carry XRPC's names.
func TestXRPCAtproto(t *testing.T) {
	psk := testutil.PSK(t)
	key, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := atcrypto.ParsePublicDIDKey(key.DID())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	cfg := nodeConfig(t, filepath.Join(root, "a"), psk, key)
	cfg.Bootstrap = true
	a := startServed(t, cfg, Config{})
	testutil.WaitFor(t, 10*time.Second, "a holds", a.Holds)
	token := []byte("join-token-0123456789")
	a.AllowJoin(token, time.Now().Add(time.Minute))
	cfg2 := nodeConfig(t, filepath.Join(root, "b"), psk, key)
	cfg2.Join = &node.JoinConfig{Seeds: a.Addrs(), Token: token}
	b := startServed(t, cfg2, Config{})
	testutil.WaitFor(t, 10*time.Second, "two members", func() bool { return b.State().Members == 2 })

	model := map[string][]byte{}
	put := func(n *served, id, rkey, text string) {
		p := "app.bsky.feed.post/" + rkey
		v := atRecord(t, text)
		atSubmit(t, n, intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: p, Value: v})
		model[p] = v
	}
	for i := range 12 {
		put(a, fmt.Sprintf("p%d", i), fmt.Sprintf("3kpost%07d", i), fmt.Sprintf("post %d", i))
	}
	put(b, "u1", "3kpost0000003", "post 3, edited") // through the follower
	atSubmit(t, a, intentlog.Intent{ID: "d1", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3kpost0000005"})
	delete(model, "app.bsky.feed.post/3kpost0000005")
	put(a, "same", "3kpost0000001", "post 1") // the same record again: a commit that changes nothing
	head := a.State().Head.Seq
	testutil.WaitFor(t, 10*time.Second, "the follower applied the head", func() bool { return b.State().Head.Seq == head })

	// subscribeRepos: identical bytes on both replicas, from 0 and from the middle.
	stream := func(n *served, q string, count int) [][]byte {
		c, _, err := dialStream(n.APISocket(), q)
		if err != nil {
			t.Fatalf("subscribeRepos%s on %s: %v", q, n.ID(), err)
		}
		defer c.Close()
		return readFrames(t, c, count)
	}
	fa, fb := stream(a, "?cursor=0", int(head)), stream(b, "?cursor=0", int(head))
	for i := range fa {
		if !bytes.Equal(fa[i], fb[i]) {
			t.Fatalf("seq %d: the holder and the follower serve different frames", i+1)
		}
	}
	mid := head / 2
	fm := stream(b, fmt.Sprintf("?cursor=%d", mid), int(head-mid))
	for i := range fm {
		if !bytes.Equal(fm[i], fa[int(mid)+i]) {
			t.Fatalf("seq %d from cursor %d: not the frame served from cursor 0", int(mid)+i+1, mid)
		}
	}
	evs := parseFrames(t, fa)
	for i, xev := range evs {
		var re bytes.Buffer
		if err := xev.Serialize(&re); err != nil || !bytes.Equal(re.Bytes(), fa[i]) {
			t.Fatalf("seq %d: indigo re-encodes the frame differently (%v)", i+1, err)
		}
	}
	checkCommits(t, pub, 1, evs)

	// indigo's own stream consumer, from cursor 0, then a live commit.
	conn, _, err := dialStream(b.APISocket(), "?cursor=0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *events.XRPCStreamEvent, 64)
	rsc := &events.RepoStreamCallbacks{RepoCommit: func(evt *comatproto.SyncSubscribeRepos_Commit) error {
		got <- &events.XRPCStreamEvent{RepoCommit: evt}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- events.HandleRepoStream(ctx, conn, sequential.NewScheduler("test", rsc.EventHandler), testutil.Logger(t))
	}()
	var consumed []*events.XRPCStreamEvent
	next := func() *events.XRPCStreamEvent {
		select {
		case e := <-got:
			return e
		case err := <-done:
			t.Fatalf("indigo's consumer stopped: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("no event from indigo's consumer after %d", len(consumed))
		}
		return nil
	}
	for range head {
		consumed = append(consumed, next())
	}
	put(a, "live", "3kpostlive001", "live post")
	consumed = append(consumed, next())
	checkCommits(t, pub, 1, consumed)
	cancel()
	<-done

	// A cursor past the head: FutureCursor, then the server closes.
	c, _, err := dialStream(a.APISocket(), fmt.Sprintf("?cursor=%d", head+100))
	if err != nil {
		t.Fatal(err)
	}
	xe := parseFrames(t, readFrames(t, c, 1))[0]
	if xe.Error == nil || xe.Error.Error != XRPCFutureCursor {
		t.Fatalf("future cursor: got %+v", xe)
	}
	if _, _, err := c.ReadMessage(); err == nil {
		t.Fatal("the stream stayed open after FutureCursor")
	}
	c.Close()

	// getLatestCommit, getRepo: the same on both replicas; indigo loads the repository.
	did := key.DID()
	var latest [2][]byte
	var cars [2][]byte
	for i, n := range []*served{a, b} {
		testutil.WaitFor(t, 10*time.Second, "the live commit applied", func() bool { return n.State().Head.Seq == head+1 })
		st, ej, body := xrpcGet(t, n.APISocket(), "/xrpc/com.atproto.sync.getLatestCommit?did="+did)
		if st != http.StatusOK {
			t.Fatalf("getLatestCommit: %d %+v", st, ej)
		}
		latest[i] = body
		st, ej, cars[i] = xrpcGet(t, n.APISocket(), "/xrpc/com.atproto.sync.getRepo?did="+did)
		if st != http.StatusOK {
			t.Fatalf("getRepo: %d %+v", st, ej)
		}
	}
	if !bytes.Equal(latest[0], latest[1]) || !bytes.Equal(cars[0], cars[1]) {
		t.Fatal("the replicas answer getLatestCommit or getRepo differently")
	}
	var lc struct{ CID, Rev string }
	if err := json.Unmarshal(latest[0], &lc); err != nil {
		t.Fatal(err)
	}
	ctxb := context.Background()
	ic, ir, err := repo.LoadRepoFromCAR(ctxb, bytes.NewReader(cars[0]))
	if err != nil {
		t.Fatalf("indigo LoadRepoFromCAR (getRepo): %v", err)
	}
	if err := ic.VerifySignature(pub); err != nil || ic.Rev != lc.Rev {
		t.Fatalf("getRepo's commit: rev %s, latest %s (%v)", ic.Rev, lc.Rev, err)
	}
	n := 0
	err = ir.MST.Walk(func(k []byte, _ cid.Cid) error {
		nsid, rkey, _ := syntax.ParseRepoPath(string(k))
		v, _, err := ir.GetRecordBytes(ctxb, nsid, rkey)
		if err != nil || !bytes.Equal(v, model[string(k)]) {
			return fmt.Errorf("%s: %v", k, err)
		}
		n++
		return nil
	})
	if err != nil || n != len(model) {
		t.Fatalf("getRepo's records: %v (%d, want %d)", err, n, len(model))
	}

	// getRecord (sync) proves each record against the head commit, on both replicas.
	for p, v := range model {
		nsid, rkey, _ := syntax.ParseRepoPath(p)
		q := fmt.Sprintf("?did=%s&collection=%s&rkey=%s", did, nsid, rkey)
		var proofs [2][]byte
		for i, n := range []*served{a, b} {
			st, ej, body := xrpcGet(t, n.APISocket(), "/xrpc/com.atproto.sync.getRecord"+q)
			if st != http.StatusOK {
				t.Fatalf("getRecord %s: %d %+v", p, st, ej)
			}
			proofs[i] = body
		}
		if !bytes.Equal(proofs[0], proofs[1]) {
			t.Fatalf("getRecord %s: the replicas answer differently", p)
		}
		if len(proofs[0]) >= len(cars[0]) {
			t.Fatalf("getRecord %s: the proof (%d bytes) is not smaller than the repository (%d)", p, len(proofs[0]), len(cars[0]))
		}
		pc, pr, err := repo.LoadRepoFromCAR(ctxb, bytes.NewReader(proofs[0]))
		if err != nil {
			t.Fatalf("getRecord %s: indigo LoadRepoFromCAR: %v", p, err)
		}
		if err := pc.VerifySignature(pub); err != nil || pc.Rev != lc.Rev {
			t.Fatalf("getRecord %s: the proof's commit is not the head (%v)", p, err)
		}
		rec, rc, err := pr.GetRecordBytes(ctxb, nsid, rkey)
		if err != nil || !bytes.Equal(rec, v) || !bytes.Equal(atproto.CIDOf(rec), rc.Bytes()) {
			t.Fatalf("getRecord %s: indigo reads %x (%v) from the proof", p, rec, err)
		}
		// repo.getRecord: JSON that indigo reads back to the same record.
		st, ej, body := xrpcGet(t, b.APISocket(), "/xrpc/com.atproto.repo.getRecord?repo="+did+"&collection="+nsid.String()+"&rkey="+rkey.String())
		if st != http.StatusOK {
			t.Fatalf("repo.getRecord %s: %d %+v", p, st, ej)
		}
		var out struct {
			URI   string          `json:"uri"`
			CID   string          `json:"cid"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		obj, err := atdata.UnmarshalJSON(out.Value)
		if err != nil {
			t.Fatal(err)
		}
		back, err := atdata.MarshalCBOR(obj)
		if err != nil || !bytes.Equal(back, v) || out.URI != "at://"+did+"/"+p || out.CID != rc.String() {
			t.Fatalf("repo.getRecord %s: %s", p, body)
		}
	}

	// Errors, with XRPC's names.
	for _, tc := range []struct {
		path   string
		status int
		name   string
	}{
		{"/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=app.bsky.feed.post&rkey=3kpost0000005", 400, XRPCRecordNotFound},
		{"/xrpc/com.atproto.repo.getRecord?repo=" + did + "&collection=app.bsky.feed.post&rkey=3knothere", 400, XRPCRecordNotFound},
		{"/xrpc/com.atproto.sync.getRecord?did=did:plc:ewvi7nxzyoun6zhxrhs64oiz&collection=app.bsky.feed.post&rkey=3kpost0000001", 400, XRPCRepoNotFound},
		{"/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=app.bsky.feed.post", 400, XRPCInvalidRequest},
		{"/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=not..nsid&rkey=x", 400, XRPCInvalidRequest},
		{"/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=app.bsky.feed.post&rkey=x&rkey=y", 400, XRPCInvalidRequest},
		{"/xrpc/com.atproto.sync.getLatestCommit?did=" + did + "&extra=1", 400, XRPCInvalidRequest},
		{"/xrpc/com.atproto.sync.getRepo?did=" + did + "&since=notarev", 400, XRPCInvalidRequest},
		{"/xrpc/com.atproto.sync.subscribeRepos?cursor=-1", 400, XRPCInvalidRequest},
		{"/xrpc/com.atproto.sync.subscribeRepos?cursor=0", 400, XRPCInvalidRequest}, // not a WebSocket
		{"/xrpc/com.atproto.sync.listHosts", 501, XRPCNotImplemented},
	} {
		st, ej, body := xrpcGet(t, a.APISocket(), tc.path)
		if st != tc.status || ej.Error != tc.name || ej.Message == "" {
			t.Errorf("%s: %d %s, want %d %s", tc.path, st, body, tc.status, tc.name)
		}
	}
}

// TestXRPCNotAtproto: on a chain of baton's own format every XRPC method answers
// RepoNotFound saying why, subscribeRepos included (before any upgrade).
func TestXRPCNotAtproto(t *testing.T) {
	psk := testutil.PSK(t)
	cfg := nodeConfig(t, t.TempDir(), psk, testutil.Key(t, 1))
	cfg.Bootstrap = true
	n := startServed(t, cfg, Config{})
	testutil.WaitFor(t, 10*time.Second, "holds", n.Holds)
	did := n.Log().View().Chain
	for _, p := range []string{"/xrpc/com.atproto.sync.getLatestCommit?did=" + did,
		"/xrpc/com.atproto.sync.getRepo?did=" + did,
		"/xrpc/com.atproto.sync.getRecord?did=" + did + "&collection=app.bsky.feed.post&rkey=3k",
		"/xrpc/com.atproto.repo.getRecord?repo=" + did + "&collection=app.bsky.feed.post&rkey=3k",
		"/xrpc/com.atproto.sync.subscribeRepos?cursor=0"} {
		st, ej, body := xrpcGet(t, n.APISocket(), p)
		if st != http.StatusBadRequest || ej.Error != XRPCRepoNotFound || !strings.Contains(ej.Message, "baton's own format") {
			t.Errorf("%s: %d %s", p, st, body)
		}
	}
	_, resp, err := dialStream(n.APISocket(), "?cursor=0")
	if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("subscribeRepos upgraded on a baton chain: %v", err)
	}
}

// TestSubscribeReposLimits: streams are capped per listener (a second stream past
// MaxStreams is refused with 503 TooManyStreams, and requests still pass), a consumer
// that stops reading is dropped after the write timeout and its slot freed, and a
// consumer that falls behind the head is told ConsumerTooSlow.
func TestSubscribeReposLimits(t *testing.T) {
	n, key := startAtprotoHolder(t, Config{MaxStreams: 1, streamWrite: time.Second})
	big := func(id string) intentlog.Intent {
		// A record larger than a socket's buffers: writing its frame blocks until the
		// consumer reads.
		return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.bsky.feed.post/3k" + id,
			Value: atRecord(t, strings.Repeat("x", 900<<10))}
	}
	atSubmit(t, n, big("big0001"))

	// One stream, not reading: a second is refused, requests pass.
	c1, _, err := dialStream(n.APISocket(), "?cursor=0")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	_, resp, err := dialStream(n.APISocket(), "?cursor=0")
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second stream past MaxStreams 1: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	var ej errorJSON
	if json.Unmarshal(body, &ej) != nil || ej.Error != XRPCTooManyStreams {
		t.Fatalf("a second stream: %s", body)
	}
	if st, ej, _ := xrpcGet(t, n.APISocket(), "/xrpc/com.atproto.sync.getLatestCommit?did="+key.DID()); st != http.StatusOK {
		t.Fatalf("a request beside a stream: %d %+v", st, ej)
	}
	// c1 never reads: its stream is dropped after the write timeout, and the slot
	// serves another stream.
	testutil.WaitFor(t, 15*time.Second, "the stalled stream's slot is free", func() bool {
		c, _, err := dialStream(n.APISocket(), "?cursor=0")
		if err != nil {
			return false
		}
		c.Close()
		return true
	})

	// A consumer that falls behind (on a second server of the node, with a lag bound
	// of 1 and the default write timeout): live from the head, it reads nothing while
	// four big commits are applied (the server's write of the first blocks on it),
	// then reads: at most the first frames, then ConsumerTooSlow (2 or more behind).
	srv2, err := Start(n.Node, Config{Socket: filepath.Join(t.TempDir(), "lag.sock"), streamLag: 1, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close(nil)
	c1, _, err = dialStream(srv2.Socket(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	for _, id := range []string{"big0002", "big0003", "big0004", "big0005"} {
		atSubmit(t, n, big(id))
	}
	var frames []*events.XRPCStreamEvent
	for len(frames) < 5 {
		_ = c1.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, b, err := c1.ReadMessage()
		if err != nil {
			break
		}
		frames = append(frames, parseFrames(t, [][]byte{b})...)
	}
	if len(frames) == 0 || len(frames) > 3 {
		t.Fatalf("a consumer behind by more than the lag: %d frames", len(frames))
	}
	for _, f := range frames[:len(frames)-1] {
		if f.RepoCommit == nil {
			t.Fatalf("a frame before the error: %+v", f)
		}
	}
	if last := frames[len(frames)-1]; last.Error == nil || last.Error.Error != XRPCConsumerTooSlow {
		t.Fatalf("a consumer behind by more than the lag: %d frames, last %+v", len(frames), last)
	}
}

// TestSubscribeReposTCP: on the TCP listener a stream needs the bearer token (401
// before any upgrade without it), streams beyond MaxStreams are refused, and the
// open streams take none of MaxConns: with MaxConns 2 and two streams open, two
// authenticated clients holding keep-alive connections are still served at once.
func TestSubscribeReposTCP(t *testing.T) {
	n, key := startAtprotoHolder(t, Config{Addr: "127.0.0.1:0", Token: testToken, MaxConns: 2, MaxStreams: 2})
	atSubmit(t, n, intentlog.Intent{ID: "p1", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3kp1", Value: atRecord(t, "one")})
	url := "ws://" + n.srv.Addr() + "/xrpc/com.atproto.sync.subscribeRepos?cursor=0"
	auth := http.Header{"Authorization": {"Bearer " + testToken}}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	if _, resp, err := d.Dial(url, nil); resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a stream without the token: %v", err)
	}
	var streams []*websocket.Conn
	for range 2 {
		// The refused connection above may not be closed on the server's side yet:
		// then it is the one unauthenticated connection MaxConns 2 allows, under
		// 500 ms old, and the guard refuses the newcomer (a reset). Dial again.
		var c *websocket.Conn
		testutil.WaitFor(t, 10*time.Second, "an authenticated stream", func() bool {
			var err error
			c, _, err = d.Dial(url, auth)
			return err == nil
		})
		defer c.Close()
		readFrames(t, c, 1)
		streams = append(streams, c)
	}
	if _, resp, err := d.Dial(url, auth); resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third stream past MaxStreams 2: %v", err)
	}
	for i := range 2 {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
		req, _ := http.NewRequest(http.MethodGet, "http://"+n.srv.Addr()+"/xrpc/com.atproto.sync.getLatestCommit?did="+key.DID(), nil)
		req.Header = auth
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("client %d beside two streams: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d beside two streams: %d", i, resp.StatusCode)
		}
		defer hc.CloseIdleConnections() // keep this one's connection open meanwhile
	}
	// The streams still follow the chain.
	atSubmit(t, n, intentlog.Intent{ID: "p2", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3kp2", Value: atRecord(t, "two")})
	for _, c := range streams {
		if xe := parseFrames(t, readFrames(t, c, 1))[0]; xe.RepoCommit == nil || xe.RepoCommit.Seq != 2 {
			t.Fatalf("a stream after the requests: %+v", xe)
		}
	}
}

// TestSubscribeReposFailover: a stream open on a follower of three real nodes goes on
// across the holder's death: the commits of both epochs arrive in order and indigo
// accepts them as one repository's (since/prevData chain across the failover); the
// killed node, restarted and caught up, serves the same bytes from cursor 0 as the
// other two.
func TestSubscribeReposFailover(t *testing.T) {
	psk := testutil.PSK(t)
	key, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := atcrypto.ParsePublicDIDKey(key.DID())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	cfgs := make([]node.Config, 3)
	nodes := make([]*served, 3)
	for i := range cfgs {
		cfgs[i] = nodeConfig(t, filepath.Join(root, string(rune('a'+i))), psk, key)
	}
	boot := cfgs[0]
	boot.Bootstrap = true
	nodes[0] = startServed(t, boot, Config{})
	testutil.WaitFor(t, 10*time.Second, "a holds", nodes[0].Holds)
	token := []byte("join-token-0123456789")
	nodes[0].AllowJoins(token, time.Now().Add(time.Minute), 2)
	for i := 1; i < 3; i++ {
		cfgs[i].Join = &node.JoinConfig{Seeds: nodes[0].Addrs(), Token: token}
		nodes[i] = startServed(t, cfgs[i], Config{})
	}
	testutil.WaitFor(t, 10*time.Second, "three members", func() bool {
		for _, n := range nodes {
			if n.State().Members != 3 {
				return false
			}
		}
		return true
	})
	holder := func() int {
		for i, n := range nodes {
			if n != nil && n.Holds() {
				return i
			}
		}
		return -1
	}
	testutil.WaitFor(t, 10*time.Second, "a holder", func() bool { return holder() >= 0 })
	put := func(i int, id string) {
		p := "app.bsky.feed.post/3k" + id
		atSubmit(t, nodes[i], intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: p, Value: atRecord(t, id)})
	}
	h := holder()
	for i := range 4 {
		put(h, fmt.Sprintf("before%d", i))
	}
	f := (h + 1) % 3 // a follower
	conn, _, err := dialStream(nodes[f].APISocket(), "?cursor=0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frames := make(chan []byte, 64)
	go func() {
		defer close(frames)
		for {
			_, b, err := conn.ReadMessage()
			if err != nil {
				return
			}
			frames <- b
		}
	}()

	// Kill the holder; another takes over and signs.
	nodes[h].srv.Close(nil)
	if err := nodes[h].Kill(); err != nil {
		t.Fatal(err)
	}
	nodes[h] = nil
	testutil.WaitFor(t, 15*time.Second, "a new holder", func() bool { return holder() >= 0 })
	for i := range 4 {
		put(holder(), fmt.Sprintf("after%d", i))
	}
	var got [][]byte
	for len(got) < 8 {
		select {
		case b, ok := <-frames:
			if !ok {
				t.Fatalf("the follower's stream ended after %d frames", len(got))
			}
			got = append(got, b)
		case <-time.After(20 * time.Second):
			t.Fatalf("%d frames from the follower's stream", len(got))
		}
	}
	checkCommits(t, pub, 1, parseFrames(t, got))
	epochs := map[uint64]bool{}
	for seq := uint64(1); seq <= 8; seq++ {
		raw, err := nodes[f].Log().Commit(seq)
		if err != nil {
			t.Fatal(err)
		}
		e, err := atproto.DecodeEnvelope(raw)
		if err != nil {
			t.Fatal(err)
		}
		epochs[e.Commit.Epoch] = true
	}
	if len(epochs) < 2 {
		t.Fatalf("the 8 commits span %d epoch(s): no failover in the stream", len(epochs))
	}

	// The killed node, restarted, serves the same bytes.
	nodes[h] = startServed(t, cfgs[h], Config{})
	head := nodes[f].State().Head.Seq
	testutil.WaitFor(t, 15*time.Second, "the restarted node caught up", func() bool { return nodes[h].State().Head.Seq >= head })
	var want [][]byte
	for i, n := range nodes {
		c, _, err := dialStream(n.APISocket(), "?cursor=0")
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		fr := readFrames(t, c, int(head))
		c.Close()
		if want == nil {
			want = fr
			continue
		}
		for j := range fr {
			if !bytes.Equal(fr[j], want[j]) {
				t.Fatalf("node %d serves another frame at seq %d", i, j+1)
			}
		}
	}
}
