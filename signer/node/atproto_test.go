package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/chain/atproto/indigocheck"
)

// atPut is an intent writing an app.bsky.feed.post record (DAG-CBOR) at rkey.
func atPut(t testing.TB, id, rkey, text string) intentlog.Intent {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	v, err := em.Marshal(map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2026-12-02T02:00:00.000Z"})
	if err != nil {
		t.Fatal(err)
	}
	return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.bsky.feed.post/" + rkey, Value: v}
}

// repoHead reads a node's applied repository head.
func repoHead(t testing.TB, n *Node) atproto.Head {
	t.Helper()
	var h atproto.Head
	err := n.log.ReadFormat(func(st intentlog.FormatStore) error {
		var err error
		h, err = atproto.DecodeHead(st.Head())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestNodeAtprotoChain runs three real Nodes over libp2p on loopback on a chain whose
// key is a P-256 did:key: the founder's genesis declares the atproto format, the
// holder signs atproto commits (through a follower, concurrently, updates, a delete,
// intents that change nothing), the holder is killed and another takes over, the killed one restarts and
// catches up. Then every node's chain is checked by indigo (VerifyCommitMessage,
// LoadRepoFromCAR, VerifySignature on every commit's event, the relay's rev/prevData
// checks, the whole repository's CAR), the chains are byte-equal, every replica's MST
// root is the same, and the records are the intents applied.
func TestNodeAtprotoChain(t *testing.T) {
	psk := testutil.PSK(t)
	key, err := atproto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}
	nodes := make([]*Node, 3)
	live := func() []*Node {
		var out []*Node
		for _, n := range nodes {
			if n != nil {
				out = append(out, n)
			}
		}
		return out
	}
	ctx := context.Background()
	model := map[string][]byte{} // path -> record: what the applied intents say
	var mu sync.Mutex
	submit := func(n *Node, in intentlog.Intent) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, err := n.Submit(sctx, in, WaitSigned)
		if err != nil {
			t.Errorf("submit %s on %s: %v", in.ID, n.ID(), err)
			return
		}
		if res.Seq == 0 {
			t.Errorf("submit %s: not signed: %+v", in.ID, res)
			return
		}
		mu.Lock()
		if in.Op == intentlog.OpPut {
			model[in.Path] = in.Value
		} else {
			delete(model, in.Path)
		}
		mu.Unlock()
	}

	cfg := nodeConfig(t, dirs[0], psk, key)
	cfg.Bootstrap = true
	nodes[0] = startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "first node leads", func() bool { return nodes[0].State().Raft.Role == "Leader" })
	token := []byte("join-token-0123456789")
	nodes[0].AllowJoins(token, time.Now().Add(time.Minute), 2)
	for i := 1; i < 3; i++ {
		cfg := nodeConfig(t, dirs[i], psk, key)
		cfg.Join = &JoinConfig{Seeds: nodes[0].Addrs(), Token: token}
		nodes[i] = startNode(t, cfg)
	}
	testutil.WaitFor(t, 10*time.Second, "three members everywhere", func() bool {
		for _, n := range nodes {
			if n.State().Members != 3 {
				return false
			}
		}
		return true
	})
	testutil.WaitFor(t, 10*time.Second, "a holder", func() bool { return holderOf(nodes...) != nil })
	if v := nodes[0].log.View(); v.Genesis.Version != chain.FormatAtproto || v.Chain != key.DID() {
		t.Fatalf("genesis: version %d chain %s, want %d %s", v.Genesis.Version, v.Chain, chain.FormatAtproto, key.DID())
	}

	// One rule at every entrance, the chain format's included: a record that is not
	// DAG-CBOR is refused by Submit on the holder and on a follower, before it reaches
	// the log or a commit (before ValidateIntentIn, the holder signed it and the apply
	// refused the commit for its content: a defect and an epoch bump).
	rejected := func() (sum uint64) {
		for _, n := range nodes {
			sum += n.log.Rejections()[intentlog.ReasonBadIntent]
		}
		return sum
	}
	before := rejected()
	for _, n := range nodes {
		bad := intentlog.Intent{ID: "not-cbor-" + n.ID()[len(n.ID())-8:], Op: intentlog.OpPut,
			Path: "app.bsky.feed.post/3kbadrecord", Value: []byte("not a DAG-CBOR map")}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := n.Submit(sctx, bad, WaitSigned)
		cancel()
		if !errors.Is(err, ErrBadRequest) {
			t.Fatalf("a non-DAG-CBOR record on %s (holds: %v): got %v, want ErrBadRequest at the entrance", n.ID(), n.Holds(), err)
		}
	}
	if after := rejected(); after != before {
		t.Fatalf("the non-DAG-CBOR records reached the log: the apply refused %d as bad_intent", after-before)
	}
	for _, n := range nodes {
		if d := n.Defect(); d != nil {
			t.Fatalf("%s: defect after refused records: %v", n.ID(), d)
		}
	}

	// Through a follower, one by one, then concurrently (batched into fewer commits).
	var f *Node
	for _, n := range nodes {
		if !n.Holds() {
			f = n
		}
	}
	for i := range 5 {
		submit(f, atPut(t, fmt.Sprintf("a-%d", i), fmt.Sprintf("3l3qo2vut%04d", i), "one"))
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { submit(nodes[i%3], atPut(t, fmt.Sprintf("b-%d", i), fmt.Sprintf("3l3qo2vuu%04d", i), "two")) })
	}
	wg.Wait()
	submit(f, atPut(t, "upd-0", "3l3qo2vut0000", "edited")) // an update
	submit(f, intentlog.Intent{ID: "del-1", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3l3qo2vut0001"})
	// Intents that change nothing are signed too (a holder that could not sign them
	// would stop the chain): the same record again, a delete of nothing.
	submit(f, atPut(t, "same-0", "3l3qo2vut0000", "edited"))
	submit(f, intentlog.Intent{ID: "del-1b", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3l3qo2vut0001"})
	if t.Failed() {
		t.FailNow()
	}

	// Failover: kill the holder, another takes over and signs on the same repository.
	h := holderOf(live()...)
	if h == nil {
		testutil.WaitFor(t, 5*time.Second, "a holder", func() bool { return holderOf(live()...) != nil })
		h = holderOf(live()...)
	}
	killed := slices.Index(nodes, h)
	epochBefore := h.log.View().Lease.Epoch
	if err := h.Kill(); err != nil {
		t.Fatal(err)
	}
	nodes[killed] = nil
	testutil.WaitFor(t, 10*time.Second, "a new holder after kill", func() bool { return holderOf(live()...) != nil })
	for i := range 5 {
		submit(live()[i%2], atPut(t, fmt.Sprintf("c-%d", i), fmt.Sprintf("3l3qo2vuv%04d", i), "after failover"))
	}
	submit(live()[0], intentlog.Intent{ID: "del-2", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3l3qo2vuu0003"})
	if t.Failed() {
		t.FailNow()
	}
	if e := live()[0].log.View().Lease.Epoch; e <= epochBefore {
		t.Fatalf("epoch %d after the failover, %d before", e, epochBefore)
	}
	nodes[killed] = startNode(t, nodeConfig(t, dirs[killed], psk, key))

	head := uint64(0)
	for _, n := range nodes {
		head = max(head, n.State().Head.Seq)
	}
	testutil.WaitFor(t, 15*time.Second, "all nodes at the same head", func() bool {
		for _, n := range nodes {
			if n.State().Head.Seq < head {
				return false
			}
		}
		return true
	})
	var first [][]byte
	var firstHead atproto.Head
	for i, n := range nodes {
		raws := chainOfNode(t, n)[:head]
		res, err := indigocheck.Chain(ctx, raws, key.DID(), time.Now())
		if err != nil {
			t.Fatalf("node %d: indigo refuses the chain: %v", i, err)
		}
		rh := repoHead(t, n)
		if !bytes.Equal(rh.Commit, res.Head.Commit) || !bytes.Equal(rh.Data, res.Head.Data) {
			t.Fatalf("node %d: the applied repository (root %x) is not the replayed one (%x)", i, rh.Data, res.Head.Data)
		}
		if first == nil {
			first, firstHead = raws, rh
			if len(res.Records) != len(model) {
				t.Fatalf("%d records in the repository, %d applied", len(res.Records), len(model))
			}
			for p, rec := range model {
				if !bytes.Equal(res.Records[p], rec) {
					t.Fatalf("record %s differs from the intent applied", p)
				}
			}
			t.Logf("%d commits accepted by indigo, %d records, rev %s", res.Commits, len(res.Records), rh.Rev)
			continue
		}
		if !slices.EqualFunc(first, raws, bytes.Equal) {
			t.Fatalf("node %d: chain differs", i)
		}
		if !bytes.Equal(rh.Data, firstHead.Data) {
			t.Fatalf("node %d: MST root %x, node 0 %x", i, rh.Data, firstHead.Data)
		}
	}
	// The commits span the failover: more than one epoch, one signer each.
	epochs := map[uint64]string{}
	for _, raw := range first {
		e, err := atproto.DecodeEnvelope(raw)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := epochs[e.Commit.Epoch]; ok && s != e.Commit.Signer {
			t.Fatalf("epoch %d signed by %s and %s", e.Commit.Epoch, s, e.Commit.Signer)
		}
		epochs[e.Commit.Epoch] = e.Commit.Signer
	}
	if len(epochs) < 2 {
		t.Fatalf("commits of %d epochs: no failover in the chain", len(epochs))
	}
}
