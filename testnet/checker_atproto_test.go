package testnet

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// atChain builds a real atproto chain (P-256 key, the repository replayed commit by
// commit as a replica's apply does).
type atChain struct {
	t    *testing.T
	key  *atproto.Key
	bs   atproto.MemBlocks
	head atproto.Head
	raws [][]byte
}

func newAtChain(t *testing.T) *atChain {
	t.Helper()
	k, err := atproto.ParseKey([]byte(strings.Repeat("\x42", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return &atChain{t: t, key: k, bs: atproto.MemBlocks{}}
}

// record is a DAG-CBOR record naming id.
func atRecord(t *testing.T, id string) []byte {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := em.Marshal(map[string]any{"$type": "app.baton.drill", "id": id})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// propose signs the next commit with rev, epoch and one created record per id, on the
// current repository; it does not apply it.
func (c *atChain) propose(epoch uint64, rev string, ids ...string) []byte {
	c.t.Helper()
	var ops []chain.Op
	for _, id := range ids {
		ops = append(ops, chain.Op{ID: id, Kind: chain.Put, Path: "app.baton.drill/" + id, Value: atRecord(c.t, id)})
	}
	cm := chain.Commit{Chain: c.key.DID(), Seq: uint64(len(c.raws) + 1), Epoch: epoch, Signer: fmt.Sprintf("peer%d", epoch),
		Time: t0.UnixMilli(), Ops: ops}
	if n := len(c.raws); n > 0 {
		h := atproto.Hash(c.raws[n-1])
		cm.Prev = h[:]
	}
	raw, err := atproto.Propose(c.key, c.bs, c.head, cm, c.key.DID(), rev)
	if err != nil {
		c.t.Fatal(err)
	}
	return raw
}

// apply appends raw to the chain without checking it (a broken chain, for the tests
// of the checker's rules): the repository moves to its data as far as the blocks go.
func (c *atChain) apply(raw []byte) {
	c.t.Helper()
	e, err := atproto.DecodeEnvelope(raw)
	if err != nil {
		c.t.Fatal(err)
	}
	if st, err := atproto.Apply(c.bs, c.head, e); err == nil {
		c.bs.Put(st.Blocks)
		c.head = st.Head
	}
	c.raws = append(c.raws, raw)
}

func (c *atChain) copyRaws() [][]byte { return append([][]byte(nil), c.raws...) }

// The checker and the signature audit take an atproto chain through its format: a
// clean chain with a failover has no finding (before, every commit was an invalid
// chain and an unverified signature: chain.VerifyChain read them as version 1).
func TestCheckAtprotoChain(t *testing.T) {
	c := newAtChain(t)
	revs := []string{"3lbbbbbbbbb22", "3lbbbbbbbbc22", "3lbbbbbbbbd22", "3lbbbbbbbbe23"}
	var acks []Ack
	for i, rev := range revs {
		epoch := uint64(1 + i/2)
		id := fmt.Sprintf("i%d", i)
		c.apply(c.propose(epoch, rev, id))
		acks = append(acks, Ack{ID: id, At: t0, Device: "d0", Index: uint64(i + 1)})
	}
	in := CheckInput{Chain: c.key.DID(), Acked: acks, FaultFree: true,
		Devices:    []DeviceChain{{Device: "d0", Commits: c.copyRaws()}, {Device: "d1", Commits: c.copyRaws()}},
		Signatures: signaturesOf(t, c.key.DID(), c.copyRaws()...)}
	r := Check(in)
	if !r.OK() || r.Commits != 4 || r.Intents != 4 || r.Signed != 4 || r.Unverified != 0 || len(r.Failovers) != 1 {
		t.Fatalf("clean atproto chain: findings %v commits %d intents %d signed %d unverified %d failovers %d",
			r.Findings, r.Commits, r.Intents, r.Signed, r.Unverified, len(r.Failovers))
	}
	// A second commit signed for seq 4 in epoch 2 (refused by the apply): equivocation.
	c.raws = c.raws[:3]
	other := c.propose(2, "3lbbbbbbbbf22", "i9")
	in.Signatures = signaturesOf(t, c.key.DID(), append(in.Devices[0].Commits, other)...)
	if r := Check(in); r.Equivocations != 1 || kinds(r) != "equivocation,refused_signature" {
		t.Fatalf("equivocation on an atproto chain: %d, %s", r.Equivocations, kinds(r))
	}
}

// The atproto rules: a rev that does not increase is refused by the format's
// verification (invalid chain) and is a fork (two commits with one rev); so is a
// commit that builds on the same repository state as an earlier one (one prevData).
func TestCheckAtprotoLinks(t *testing.T) {
	c := newAtChain(t)
	c.apply(c.propose(1, "3lbbbbbbbbb22", "a"))
	c.apply(c.propose(1, "3lbbbbbbbbc22", "b"))
	c.apply(c.propose(1, "3lbbbbbbbbc22", "c")) // rev again
	r := Check(CheckInput{Chain: c.key.DID(), Devices: []DeviceChain{{Device: "d0", Commits: c.copyRaws()}}})
	if r.Invalid != 1 || r.Forks != 1 || !strings.Contains(kinds(r), FindingFork) {
		t.Fatalf("a repeated rev: invalid %d forks %d: %v", r.Invalid, r.Forks, r.Findings)
	}

	// One prevData twice: seq 3 builds on seq 1's repository (the rules see it
	// whatever the link hashes say).
	c = newAtChain(t)
	c.apply(c.propose(1, "3lbbbbbbbbb22", "a"))
	bs, head := atproto.MemBlocks{}, c.head
	for k, v := range c.bs {
		bs[k] = v
	}
	c.apply(c.propose(1, "3lbbbbbbbbc22", "b"))
	c.bs, c.head = bs, head // back to seq 1's repository
	c.apply(c.propose(1, "3lbbbbbbbbd22", "c"))
	r = Check(CheckInput{Chain: c.key.DID(), Devices: []DeviceChain{{Device: "d0", Commits: c.copyRaws()}}})
	found := false
	for _, f := range r.Findings {
		found = found || f.Kind == FindingFork && strings.Contains(f.Detail, "prevData")
	}
	if r.Invalid != 1 || !found {
		t.Fatalf("one prevData twice: invalid %d: %v", r.Invalid, r.Findings)
	}
}

func encodeHead(c *atChain) ([]byte, error) { return atproto.EncodeHead(c.head) }
