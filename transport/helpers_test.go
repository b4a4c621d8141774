package transport

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// testFSM appends every entry; Apply returns the new length as 8 bytes.
type testFSM struct {
	mu      sync.Mutex
	entries [][]byte

	restores atomic.Int64 // completed Restore calls: the proof of a snapshot install
}

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, append([]byte(nil), l.Data...))
	return binary.BigEndian.AppendUint64(nil, uint64(len(f.entries)))
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.entries)
	return fsmSnap(b), err
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var es [][]byte
	if err := json.NewDecoder(rc).Decode(&es); err != nil {
		return err
	}
	f.mu.Lock()
	f.entries = es
	f.mu.Unlock()
	f.restores.Add(1)
	return nil
}

func (f *testFSM) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

func (f *testFSM) has(e []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.entries {
		if string(x) == string(e) {
			return true
		}
	}
	return false
}

type fsmSnap []byte

func (s fsmSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
func (fsmSnap) Release() {}

// raftApply is the ApplyFunc the tests (and the benchmark) give the Cluster.
func raftApply(r *raft.Raft) ApplyFunc {
	return func(ctx context.Context, entry []byte) ([]byte, error) {
		timeout := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		f := r.Apply(entry, timeout)
		if err := f.Error(); err != nil {
			return nil, err
		}
		switch v := f.Response().(type) {
		case error:
			return nil, v
		case []byte:
			return v, nil
		}
		return nil, errors.New("unexpected fsm response")
	}
}

// raftBarrier is the ClusterConfig.Barrier the tests give the Cluster: a raft
// barrier, then the applied index.
func raftBarrier(r *raft.Raft) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		timeout := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		if err := r.Barrier(timeout).Error(); err != nil {
			return 0, err
		}
		// Not AppliedIndex: hashicorp/raft's FSM goroutine may answer the barrier
		// before the main loop records the batch as applied (processLogs calls
		// setLastApplied after handing the batch over), so it can still read the
		// index before the barrier (TestBarrier failed so under -race in CI). The
		// barrier entry is in the log by now: the last index is at or past it.
		return r.LastIndex(), nil
	}
}

// testRaftConfig has short timeouts so elections take well under a second.
func testRaftConfig(id peer.ID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id.String())
	// Short enough for quick elections, long enough that a loaded machine (the race
	// detector, two shared CPUs) does not depose leaders: with a 150 ms lease the
	// leader stepped down whenever it was starved that long, and proposals timed out.
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 400 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
	c.SnapshotThreshold = 1 << 30
	c.TrailingLogs = 10 // a manual snapshot compacts the log (snapshot install test)
	c.SnapshotInterval = time.Hour
	out := io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	c.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Error, Output: out})
	return c
}

// node is one device in a test cluster: host, raft (bolt stores, file snapshots) and
// cluster, all from one data dir so it can be restarted.
type node struct {
	t      testing.TB
	dir    string
	psk    pnet.PSK
	listen string
	tweak  func(*raft.Config)
	// ctweak adjusts the ClusterConfig (after the test defaults, Barrier included).
	ctweak func(*node, *ClusterConfig)
	// rtweak adjusts the RaftTransportConfig (Timeout 2 s by default).
	rtweak func(*RaftTransportConfig)
	// probe overrides HostConfig.ProbeInterval when not zero.
	probe time.Duration
	// advertise sets HostConfig.AdvertiseAddrs.
	advertise []string

	host      *Host
	trans     *RaftTransport
	pipelines atomic.Int64 // AppendEntriesPipeline calls made by this node's raft
	raft      *raft.Raft
	fsm       *testFSM
	store     *raftboltdb.BoltStore
	cluster   *Cluster
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newTestHost(t testing.TB, dir string, psk pnet.PSK, listen string) *Host {
	t.Helper()
	return newTestHostProbing(t, dir, psk, listen, 0, nil)
}

// newTestHostProbing is newTestHost with a probe interval (0: the default).
func newTestHostProbing(t testing.TB, dir string, psk pnet.PSK, listen string, probe time.Duration, advertise []string) *Host {
	t.Helper()
	h, err := NewHost(HostConfig{
		DataDir:        dir,
		PSK:            psk,
		ListenAddrs:    []string{listen},
		DialTimeout:    2 * time.Second,
		Logger:         testLogger(t),
		ProbeInterval:  probe,
		AdvertiseAddrs: advertise,
	})
	if err != nil {
		t.Fatalf("new host: %v", err)
	}
	return h
}

// startNode opens (or reopens) the node's host, raft and cluster.
func (n *node) start() {
	t := n.t
	t.Helper()
	n.host = newTestHostProbing(t, n.dir, n.psk, n.listen, n.probe, n.advertise)
	if n.listen == "/ip4/127.0.0.1/tcp/0" {
		n.listen = n.host.Addrs()[0].String() // restart on the same port
	}
	rcfg := RaftTransportConfig{Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()}
	if n.rtweak != nil {
		n.rtweak(&rcfg)
	}
	trans, err := n.host.RaftTransport(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	n.trans = trans
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(n.dir, "raft.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	n.store = store
	snaps, err := raft.NewFileSnapshotStore(n.dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n.fsm = &testFSM{}
	cfg := testRaftConfig(n.host.ID())
	if n.tweak != nil {
		n.tweak(cfg)
	}
	r, err := raft.NewRaft(cfg, n.fsm, store, store, snaps, &countingTransport{RaftTransport: trans, pipelines: &n.pipelines})
	if err != nil {
		t.Fatal(err)
	}
	n.raft = r
	ccfg := ClusterConfig{SyncInterval: 200 * time.Millisecond, Logger: testLogger(t), Barrier: raftBarrier(r)}
	if n.ctweak != nil {
		n.ctweak(n, &ccfg)
	}
	c, err := NewCluster(n.host, r, raftApply(r), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	n.cluster = c
}

// stop shuts the node down in the order the signer will: cluster, raft, host.
func (n *node) stop() {
	if n.host == nil {
		return
	}
	_ = n.cluster.Close()
	_ = n.raft.Shutdown().Error()
	_ = n.store.Close()
	_ = n.host.Close()
	n.host = nil
}

func (n *node) id() peer.ID { return n.host.ID() }

func (n *node) info() peer.AddrInfo { return n.host.AddrInfo() }

type testCluster struct {
	t     testing.TB
	psk   pnet.PSK
	nodes []*node
}

func newNode(t testing.TB, psk pnet.PSK) *node { return newNodeWith(t, psk, nil) }

// newNodeWith is newNode with setup run on the node before it starts.
func newNodeWith(t testing.TB, psk pnet.PSK, setup func(*node)) *node {
	n := &node{t: t, dir: t.TempDir(), psk: psk, listen: "/ip4/127.0.0.1/tcp/0"}
	if setup != nil {
		setup(n)
	}
	n.start()
	t.Cleanup(n.stop)
	return n
}

// newTestCluster starts n devices, bootstraps all of them with the same
// configuration (each knows the others' addresses), and waits for a leader.
func newTestCluster(t testing.TB, size int) *testCluster { return newTestClusterWith(t, size, nil) }

// newTestClusterWith is newTestCluster with setup run on every node before it starts.
func newTestClusterWith(t testing.TB, size int, setup func(*node)) *testCluster {
	t.Helper()
	psk, err := GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, psk: psk}
	for range size {
		tc.nodes = append(tc.nodes, newNodeWith(t, psk, setup))
	}
	var servers []raft.Server
	for _, n := range tc.nodes {
		id := raft.ServerID(n.id().String())
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: id, Address: raft.ServerAddress(id)})
		for _, m := range tc.nodes {
			if m != n {
				if err := n.host.AddMember(m.info()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, n := range tc.nodes {
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	tc.leader(tc.nodes)
	return tc
}

// leader waits until exactly one of nodes is leader and all of them agree on it.
func (tc *testCluster) leader(nodes []*node) *node {
	tc.t.Helper()
	var found *node
	waitFor(tc.t, patient, "a leader all nodes agree on", func() bool {
		found = nil
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				if found != nil {
					return false
				}
				found = n
			}
		}
		if found == nil {
			return false
		}
		for _, n := range nodes {
			if n.cluster.Leader() != found.id() {
				return false
			}
		}
		return true
	})
	return found
}

func (tc *testCluster) followers(leader *node) []*node {
	var out []*node
	for _, n := range tc.nodes {
		if n != leader && n.host != nil {
			out = append(out, n)
		}
	}
	return out
}

// late is how long past its deadline a call may return in these tests: scheduling
// delay on a loaded machine (the race detector, two shared CPUs, other test
// binaries). Every bound below is a deadline plus late: far below what a call
// waiting for anything else (a raft timeout, a hung peer) would take.
const late = time.Second

// patient is the deadline of calls expected to succeed: on a loaded machine a
// commit or a handshake can take seconds. It costs nothing when they are quick.
const patient = 20 * time.Second

// mustConnect connects h to p, retrying until patient passes: a handshake can miss
// the test hosts' 2 s dial timeout on a loaded machine.
func mustConnect(t testing.TB, h *Host, p peer.AddrInfo) {
	t.Helper()
	var last error
	deadline := time.Now().Add(patient)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), patient)
		last = h.Connect(ctx, p)
		cancel()
		if last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect %s: %v", p.ID, last)
		}
		t.Logf("connect %s (retrying): %v", p.ID, last)
	}
}

// waitFor polls cond every 10 ms until it holds or d passes (then fails the test).
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// waitApplied waits until every node's FSM holds entry.
func waitApplied(t testing.TB, nodes []*node, entry []byte) {
	t.Helper()
	waitFor(t, patient, fmt.Sprintf("entry %q applied on %d nodes", entry, len(nodes)), func() bool {
		for _, n := range nodes {
			if !n.fsm.has(entry) {
				return false
			}
		}
		return true
	})
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func configIDs(t testing.TB, r *raft.Raft) map[string]raft.ServerSuffrage {
	t.Helper()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	out := map[string]raft.ServerSuffrage{}
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = s.Suffrage
	}
	return out
}

// peerInfoOf returns the peer ID stored in dir's identity (no addresses).
func peerInfoOf(t testing.TB, dir string) peer.AddrInfo {
	k, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return peer.AddrInfo{ID: id}
}

// countingTransport counts pipelined replication streams, to show that raft
// pipelines AppendEntries over the libp2p stream layer.
type countingTransport struct {
	*RaftTransport
	pipelines *atomic.Int64
}

func (t *countingTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.RaftTransport.AppendEntriesPipeline(id, target)
	if err == nil {
		t.pipelines.Add(1)
	}
	return p, err
}

// waitBlockedWrite waits until n's raft layer has a write to p that has been blocked
// for a while (the yamux window to a frozen peer is full).
func waitBlockedWrite(t testing.TB, n *node, p *node) {
	t.Helper()
	waitFor(t, 10*time.Second, "a raft write to the frozen peer blocked for 300ms", func() bool {
		return n.host.raftLayer.Load().blockedWrite(p.id()) > 300*time.Millisecond
	})
}
