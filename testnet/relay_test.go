package testnet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/bluesky-social/indigo/cmd/relay/relay"
	"github.com/bluesky-social/indigo/cmd/relay/stream"
	"github.com/bluesky-social/indigo/cmd/relay/stream/eventmgr"
	"github.com/bluesky-social/indigo/cmd/relay/stream/persist/diskpersist"
	"github.com/bluesky-social/indigo/cmd/relay/stream/schedulers/sequential"
	"github.com/bluesky-social/indigo/util/cliutil"
	"github.com/gorilla/websocket"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// relayEvent is one event of the relay's own firehose, as its consumer saw it.
type relayEvent struct {
	kind string // commit, sync, identity, account
	rev  string // a commit's
	at   time.Time
}

// relayFeed collects the relay's firehose.
type relayFeed struct {
	mu  sync.Mutex
	evs []relayEvent
}

func (f *relayFeed) add(kind, rev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evs = append(f.evs, relayEvent{kind: kind, rev: rev, at: time.Now()})
}

func (f *relayFeed) events() []relayEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]relayEvent(nil), f.evs...)
}

func (f *relayFeed) commits() int {
	n := 0
	for _, e := range f.events() {
		if e.kind == "commit" {
			n++
		}
	}
	return n
}

// firstAfter is the first event that arrived after t, if any.
func (f *relayFeed) firstAfter(t time.Time) (relayEvent, bool) {
	for _, e := range f.events() {
		if e.at.After(t) {
			return e, true
		}
	}
	return relayEvent{}, false
}

// theName is the repository's public name: a listener on localhost that sends each
// new connection to the first device, in a fixed order, that accepts one (what DNS
// with one record per serving device gives a client that tries them in turn, or a
// proxy in front). It stops with the test.
type theName struct {
	ln     net.Listener
	addrs  []string
	mu     sync.Mutex
	served int // the device index of the last connection sent
	conns  []net.Conn
}

func startName(t *testing.T, addrs []string) *theName {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &theName{ln: ln, addrs: addrs, served: -1}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go n.pipe(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, c := range n.conns {
			c.Close()
		}
	})
	return n
}

func (n *theName) pipe(c net.Conn) {
	defer c.Close()
	for i, a := range n.addrs {
		u, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			continue
		}
		defer u.Close()
		n.mu.Lock()
		n.served = i
		n.conns = append(n.conns, c, u)
		n.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		_, _ = io.Copy(c, u)
		return
	}
}

func (n *theName) hostname() string {
	return fmt.Sprintf("localhost:%d", n.ln.Addr().(*net.TCPAddr).Port)
}

func (n *theName) servedBy() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.served
}

// startIndigoRelay runs atproto's production relay code (indigo cmd/relay's relay
// package: strict sync validation, sqlite in memory, events on disk) in process,
// knowing the repository did at the PDS host, and a consumer of its own firehose
// into feed. It crawls host once asked (Relay.SubscribeToHost).
func startIndigoRelay(t *testing.T, ctx context.Context, did, host string, feed *relayFeed) *relay.Relay {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	db, err := cliutil.SetupDatabase("sqlite://:memory:", 40)
	if err != nil {
		t.Fatal(err)
	}
	persister, err := diskpersist.NewDiskPersistence(t.TempDir(), "", db, diskpersist.DefaultDiskPersistOptions())
	if err != nil {
		t.Fatal(err)
	}
	dir := identity.NewMockDirectory()
	dir.Insert(identity.Identity{
		DID:      syntax.DID(did),
		Handle:   syntax.HandleInvalid,
		Keys:     map[string]identity.VerificationMethod{"atproto": {Type: "Multikey", PublicKeyMultibase: strings.TrimPrefix(did, "did:key:")}},
		Services: map[string]identity.ServiceEndpoint{"atproto_pds": {Type: "AtprotoPersonalDataServer", URL: "http://" + host}},
	})
	// The relay's slurper logs to slog's default as it was when it was made.
	def := slog.Default()
	slog.SetDefault(quiet)
	r, err := relay.NewRelay(db, eventmgr.NewEventManager(persister), dir, relay.DefaultRelayConfig())
	slog.SetDefault(def)
	if err != nil {
		t.Fatal(err)
	}
	persister.SetUidSource(r)
	r.Logger = quiet
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_ = r.HandleSubscribeRepos(w, req, nil, "127.0.0.1")
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = r.Slurper.Shutdown()
		_ = persister.Shutdown(context.Background())
	})
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/xrpc/com.atproto.sync.subscribeRepos", nil)
	if err != nil {
		t.Fatal(err)
	}
	cb := &stream.RepoStreamCallbacks{
		RepoCommit:   func(e *comatproto.SyncSubscribeRepos_Commit) error { feed.add("commit", e.Rev); return nil },
		RepoSync:     func(e *comatproto.SyncSubscribeRepos_Sync) error { feed.add("sync", e.Rev); return nil },
		RepoIdentity: func(*comatproto.SyncSubscribeRepos_Identity) error { feed.add("identity", ""); return nil },
		RepoAccount:  func(*comatproto.SyncSubscribeRepos_Account) error { feed.add("account", ""); return nil },
	}
	go func() {
		_ = stream.HandleRepoStream(ctx, conn, sequential.NewScheduler("baton-test", cb.EventHandler), quiet)
	}()
	return r
}

// TestProcsIndigoRelay: atproto's own relay code crawls a three-device atproto
// cluster of `baton run` processes under one name that follows the live devices
// (theName), while commits are submitted through every device; the holder is killed
// (-9), the lease is transferred, the device the relay reads from is killed (-9).
// The relay's firehose carries every commit of the final chain once, in the chain's
// order, and no other event; the relay streams a commit of the new holder soon after
// the holder's kill (target: the TTL plus 2 s), and streams again within a few
// seconds of the served device's kill (issue 40 items 3 and 5).
func TestProcsIndigoRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	const ttl = 2 * time.Second
	bin := testutil.BatonBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	xaddrs := make([]string, 3)
	for i := range xaddrs {
		xaddrs[i] = fmt.Sprintf("127.0.0.1:%d", testutil.StablePort(t))
	}
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: 3, TTL: ttl, Tick: 100 * time.Millisecond, Dir: t.TempDir(),
		Format: "atproto", Flags: func(i int) []string { return []string{"--xrpc-addr", xaddrs[i]} }})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := pc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	devs := pc.Devices()
	name := startName(t, xaddrs)
	var feed relayFeed
	r := startIndigoRelay(t, ctx, pc.Chain(), name.hostname(), &feed)
	if err := r.SubscribeToHost(ctx, name.hostname(), true, true); err != nil {
		t.Fatal(err)
	}
	load, err := StartLoad(ctx, LoadConfig{Targets: pc.LoadTargets(), Rate: 20, Max: 100000, Retries: 2, Format: FormatOf(pc.Chain())})
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	grow := func(what string, n int) {
		t.Helper()
		want := feed.commits() + n
		if err := wait.For(45*time.Second, fmt.Sprintf("%d more commits on the relay's firehose (%s)", n, what), func() bool { return feed.commits() >= want }); err != nil {
			t.Fatalf("%v: %d so far\n%s", err, feed.commits(), pc.TailLogs(20))
		}
	}
	grow("start", 20)

	// 1. kill -9 of the holder, another device than the one the relay reads.
	holder, epoch, err := pc.WaitHolder(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if holder.Index == name.servedBy() {
		to := devs[(holder.Index+1)%3]
		if err := pc.Transfer(ctx, holder, to); err != nil {
			t.Fatal(err)
		}
		if holder, epoch, err = pc.WaitHolder(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	killedHolder, killedEpoch := time.Now(), epoch
	if err := pc.Kill(holder); err != nil {
		t.Fatal(err)
	}
	if _, epoch, err = pc.WaitHolder(ctx, epoch, holder); err != nil {
		t.Fatal(err)
	}
	grow("after the holder's kill", 20)
	if err := pc.Restart(ctx, holder); err != nil {
		t.Fatal(err)
	}

	// 2. a transfer, to a device the relay does not read (so that 3 kills another).
	cur, epoch, err := pc.WaitHolder(ctx, epoch-1)
	if err != nil {
		t.Fatal(err)
	}
	served := devs[name.servedBy()]
	to := devs[(cur.Index+1)%3]
	if to == served {
		to = devs[(to.Index+1)%3]
	}
	if to != cur {
		if err := pc.Transfer(ctx, cur, to); err != nil {
			t.Fatal(err)
		}
		if _, epoch, err = pc.WaitHolder(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	grow("after the transfer", 20)

	// 3. kill -9 of the device the relay reads from.
	killedServed := time.Now()
	if err := pc.Kill(served); err != nil {
		t.Fatal(err)
	}
	grow("after the served device's kill", 20)
	load.Stop()
	<-load.Done()

	// Every commit of the final chain reaches the relay.
	live := devs[(served.Index+1)%3]
	var head uint64
	if err := wait.For(30*time.Second, "the relay to stream the chain's head", func() bool {
		st, ok := pc.State(live)
		head = st.Head.Seq
		return ok && uint64(feed.commits()) >= head
	}); err != nil {
		t.Fatalf("%v: the chain's head is seq %d, the relay streamed %d commits", err, head, feed.commits())
	}
	in, err := pc.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in.Acked = load.Acks()
	c := Check(in)
	if c.Forks+c.Lost+c.Dupes+c.Invalid != 0 {
		t.Fatalf("the cluster's chain: %v", c.Findings)
	}

	// The relay's firehose is the chain: every commit once, in order, nothing else.
	type signed struct {
		seq, epoch uint64
	}
	bySeq := in.Devices[0].Commits
	revs := map[string]signed{}
	var chainRevs []string
	for _, raw := range bySeq {
		env, err := atproto.DecodeEnvelope(raw)
		if err != nil {
			t.Fatal(err)
		}
		revs[env.Repo.Rev] = signed{env.Commit.Seq, env.Commit.Epoch}
		chainRevs = append(chainRevs, env.Repo.Rev)
	}
	evs := feed.events()
	var relayRevs []string
	for _, e := range evs {
		if e.kind != "commit" {
			t.Errorf("the relay streamed a #%s event", e.kind)
			continue
		}
		relayRevs = append(relayRevs, e.rev)
	}
	if strings.Join(relayRevs, " ") != strings.Join(chainRevs, " ") {
		t.Fatalf("the relay streamed %d commits, the chain holds %d: not the same revs in the same order\nrelay: %v\nchain: %v", len(relayRevs), len(chainRevs), relayRevs, chainRevs)
	}

	// As the relay saw it: the first commit of a later holder after the holder's kill,
	// and the first event after the served device's kill.
	var takeover time.Duration = -1
	for _, e := range evs {
		if e.at.After(killedHolder) && revs[e.rev].epoch > killedEpoch {
			takeover = e.at.Sub(killedHolder)
			break
		}
	}
	back, ok := feed.firstAfter(killedServed)
	t.Logf("relay's view (TTL %s, %d commits): kill -9 of the holder to a new holder's first commit on the relay's firehose %s; kill -9 of the served device to the relay streaming again %s",
		ttl, len(relayRevs), takeover.Round(time.Millisecond), back.at.Sub(killedServed).Round(time.Millisecond))
	// The target is TTL + 2 s (docs/DRILLS.md has the figures); the bound asserted
	// leaves room for a loaded machine under -race, and still fails a relay left in
	// its reconnect backoff (30 s) or a takeover that waits for something else.
	if takeover < 0 || takeover > 2*ttl+2*time.Second {
		t.Errorf("kill -9 of the holder to the relay streaming a new holder's commit: %s, want at most 2 TTL + 2 s (the target: TTL + 2 s)", takeover)
	}
	if !ok || back.at.Sub(killedServed) > 10*time.Second {
		t.Errorf("kill -9 of the served device to the relay streaming again: %s, want at most 10 s", back.at.Sub(killedServed))
	}
}
