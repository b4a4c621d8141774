package atproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"

	"github.com/batonhq/baton/signer/chain"
)

// Blocks is where a repository's blocks live, by CID (bbolt on a replica, a map in
// tests). Get returns nil, nil for an absent block.
type Blocks interface {
	Get(cid []byte) ([]byte, error)
}

// Block is one DAG-CBOR block and its CID.
type Block struct {
	CID  []byte
	Data []byte
}

// Head is a repository's state after its last commit; the zero Head is an empty
// repository (no commit yet).
type Head struct {
	DID    string // the genesis's (an empty head with only a DID), else fixed by the first commit
	Data   []byte // CID of the MST root
	Rev    string
	Commit []byte // CID of the last commit block
}

// RepoOp is one op as atproto's #commit event names it.
type RepoOp struct {
	Action string // "create", "update", "delete"
	Path   string
	CID    []byte // the record's new CID; nil for a delete
	Prev   []byte // its CID before; nil for a create
}

// Step is what one commit does to a repository: the head after it, the blocks it adds
// (records, MST nodes, the commit block; sorted by CID) and its ops.
type Step struct {
	Head   Head
	Blocks []Block
	Ops    []RepoOp
}

// ErrRefused wraps every reason Apply refuses a commit for.
var ErrRefused = errors.New("atproto commit refused")

// Apply checks the envelope e against the repository (head, its blocks bs) and returns
// what it changes: prevData is head's data, rev is later than head's, the DID is the
// repository's, each op's prev CID is the record's current CID (a put of an unchanged
// record is refused: ops are net), and the MST root after the ops is the commit's
// data. The signature is VerifyEnvelope's. Apply is deterministic: it reads only its
// arguments.
func Apply(bs Blocks, head Head, e Envelope) (Step, error) {
	return (*TreeCache)(nil).Apply(bs, head, e)
}

// TreeCache keeps the MST of the last repository state a replica applied in memory, so
// that the next commit does not load the whole tree from the block store (loading costs
// time linear in the repository's size). The tree is content-addressed: the tree of a
// root CID is the same however it was reached, so the cache changes no outcome. A nil
// *TreeCache caches nothing. Safe for concurrent use.
type TreeCache struct {
	mu   sync.Mutex
	root []byte
	tree *mst.Tree
}

// take returns the cached tree if it is root's, and empties the cache (the caller
// mutates the tree).
func (c *TreeCache) take(root []byte) *mst.Tree {
	if c == nil || root == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tree
	if t == nil || !bytes.Equal(c.root, root) {
		return nil
	}
	c.root, c.tree = nil, nil
	return t
}

func (c *TreeCache) keep(root []byte, t *mst.Tree) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.root, c.tree = root, t
	c.mu.Unlock()
}

// Apply is the package's Apply, starting from the cached tree when it is head's.
func (c *TreeCache) Apply(bs Blocks, head Head, e Envelope) (Step, error) {
	refuse := func(format string, args ...any) (Step, error) {
		return Step{}, fmt.Errorf("%w: seq %d: %s", ErrRefused, e.Commit.Seq, fmt.Sprintf(format, args...))
	}
	if !bytes.Equal(e.PrevData, head.Data) {
		return refuse("prevData is not the previous commit's data")
	}
	if head.DID != "" && e.Repo.DID != head.DID {
		return refuse("did %s, the repository is %s", e.Repo.DID, head.DID)
	}
	if head.Rev != "" && e.Repo.Rev <= head.Rev { // TIDs sort as their integers
		return refuse("rev %s is not after %s", e.Repo.Rev, head.Rev)
	}
	tree := c.take(head.Data)
	if tree == nil {
		var err error
		if tree, err = loadTree(bs, head.Data); err != nil {
			return Step{}, err
		}
	}
	ops, _, recs, err := applyOps(tree, e.Commit.Ops, e.OpPrev)
	if err != nil {
		return refuse("%v", err)
	}
	root, nodes, err := writeDiff(tree)
	if err != nil {
		return Step{}, err
	}
	if !bytes.Equal(root, e.Repo.Data) {
		return refuse("data %x is not the recomputed MST root %x", e.Repo.Data, root)
	}
	c.keep(root, tree) // root's tree, whether or not the log accepts this commit
	if !slices.ContainsFunc(nodes, func(b Block) bool { return bytes.Equal(b.CID, root) }) {
		// The root did not change (no op changed a record): the event still carries the
		// root node, which a reader of the event's CAR slice loads the tree from.
		if b, err := bs.Get(root); err == nil && b != nil {
			nodes = append(nodes, Block{CID: root, Data: b})
		}
	}
	st := Step{Head: Head{DID: e.Repo.DID, Data: root, Rev: e.Repo.Rev, Commit: CIDOf(e.Block)}, Ops: ops}
	st.Blocks = sortBlocks(append(append(recs, nodes...), Block{CID: st.Head.Commit, Data: e.Block}))
	return st, nil
}

// applyOps applies the ops (one per intent, in order) to tree, checking each op's prev
// CID when opPrev is given (nil: fill it in, for a proposal). Intents need not be net:
// two on one path, a put of an unchanged record and a delete of an absent one are
// applied as they come (the last two change nothing), so that every intent the log
// accepted can be signed. It returns the net ops as a #commit event names them (one
// per path whose record changed, in the order the paths first appear), each intent's
// prev CID, and the blocks of the records the tree points at afterwards.
func applyOps(tree *mst.Tree, in []chain.Op, opPrev [][]byte) ([]RepoOp, [][]byte, []Block, error) {
	type pathState struct {
		first, last []byte // CIDs before the first op and after the last (nil: none)
		val         []byte // the last put's record
	}
	prevs := make([][]byte, len(in))
	var order []string
	state := map[string]*pathState{} // lookups only: order is the slice's
	for i, op := range in {
		key := []byte(op.Path)
		cur, err := tree.Get(key)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("op %d: %v", i, err)
		}
		var prev []byte
		if cur != nil {
			prev = cur.Bytes()
		}
		if opPrev != nil && !bytes.Equal(opPrev[i], prev) {
			return nil, nil, nil, fmt.Errorf("op %d (%s): prev CID is not the record's current CID", i, op.Path)
		}
		prevs[i] = prev
		ps := state[op.Path]
		if ps == nil {
			ps = &pathState{first: prev}
			state[op.Path] = ps
			order = append(order, op.Path)
		}
		switch op.Kind {
		case chain.Put:
			c := CIDOf(op.Value)
			if !bytes.Equal(c, prev) {
				cc, err := cid.Cast(c)
				if err != nil {
					return nil, nil, nil, err
				}
				if _, err := tree.Insert(key, cc); err != nil {
					return nil, nil, nil, fmt.Errorf("op %d: %v", i, err)
				}
			}
			ps.last, ps.val = c, op.Value
		case chain.Del:
			if prev != nil {
				if _, err := tree.Remove(key); err != nil {
					return nil, nil, nil, fmt.Errorf("op %d: %v", i, err)
				}
			}
			ps.last, ps.val = nil, nil
		default:
			return nil, nil, nil, fmt.Errorf("op %d: unknown kind %d", i, op.Kind)
		}
	}
	var ops []RepoOp
	var recs []Block
	for _, p := range order {
		ps := state[p]
		if bytes.Equal(ps.first, ps.last) {
			continue // no change on this path: no op in the event
		}
		op := RepoOp{Action: "update", Path: p, CID: ps.last, Prev: ps.first}
		switch {
		case ps.first == nil:
			op.Action = "create"
		case ps.last == nil:
			op.Action = "delete"
		}
		ops = append(ops, op)
		if ps.last != nil {
			recs = append(recs, Block{CID: ps.last, Data: ps.val})
		}
	}
	return ops, prevs, recs, nil
}

func loadTree(bs Blocks, root []byte) (*mst.Tree, error) {
	if root == nil {
		t := mst.NewEmptyTree()
		return &t, nil
	}
	c, err := cid.Cast(root)
	if err != nil {
		return nil, fmt.Errorf("repository root: %v", err)
	}
	t, err := mst.LoadTreeFromStore(context.Background(), source{bs}, c)
	if err != nil {
		return nil, fmt.Errorf("load the repository's MST: %w", err)
	}
	return t, nil
}

// writeDiff writes the tree's changed nodes once (RootCID alone would clear the dirty
// flags without writing them) and returns the root and the new node blocks.
func writeDiff(tree *mst.Tree) ([]byte, []Block, error) {
	var col collector
	root, err := tree.WriteDiffBlocks(context.Background(), &col)
	if err != nil {
		return nil, nil, fmt.Errorf("write the MST: %w", err)
	}
	return root.Bytes(), col.blocks, nil
}

func sortBlocks(bl []Block) []Block {
	slices.SortFunc(bl, func(a, b Block) int { return bytes.Compare(a.CID, b.CID) })
	return slices.CompactFunc(bl, func(a, b Block) bool { return bytes.Equal(a.CID, b.CID) })
}

// source adapts Blocks to the MST's block source.
type source struct{ bs Blocks }

func (s source) Get(_ context.Context, c cid.Cid) (blocks.Block, error) {
	b, err := s.bs.Get(c.Bytes())
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, &ipld.ErrNotFound{Cid: c}
	}
	return blocks.NewBlockWithCid(b, c)
}

// collector is the blockstore WriteDiffBlocks writes into: it keeps what is put.
type collector struct{ blocks []Block }

func (c *collector) Put(_ context.Context, b blocks.Block) error {
	c.blocks = append(c.blocks, Block{CID: b.Cid().Bytes(), Data: b.RawData()})
	return nil
}

func (c *collector) PutMany(ctx context.Context, bl []blocks.Block) error {
	for _, b := range bl {
		_ = c.Put(ctx, b)
	}
	return nil
}

func (c *collector) DeleteBlock(context.Context, cid.Cid) error { return nil }
func (c *collector) Has(_ context.Context, k cid.Cid) (bool, error) {
	for _, b := range c.blocks {
		if bytes.Equal(b.CID, k.Bytes()) {
			return true, nil
		}
	}
	return false, nil
}
func (c *collector) Get(_ context.Context, k cid.Cid) (blocks.Block, error) {
	return nil, &ipld.ErrNotFound{Cid: k}
}
func (c *collector) GetSize(_ context.Context, k cid.Cid) (int, error) {
	return 0, &ipld.ErrNotFound{Cid: k}
}
func (c *collector) AllKeysChan(context.Context) (<-chan cid.Cid, error) {
	ch := make(chan cid.Cid)
	close(ch)
	return ch, nil
}
func (c *collector) HashOnRead(bool) {}

// Propose builds and signs the next commit of the repository (head, bs) for the fence
// and ops in c (Chain, Seq, Epoch, Signer, Prev, Time, Ops), with repository DID did
// and revision rev (NextRev): it computes each op's prev CID, the new MST root and
// prevData, signs the commit block with key and returns the envelope. It changes
// nothing: the apply does, once the envelope is in the log.
func Propose(key chain.Key, bs Blocks, head Head, c chain.Commit, did, rev string) ([]byte, error) {
	if c.Chain == "" {
		c.Chain = key.DID()
	}
	if c.Chain != key.DID() {
		return nil, fmt.Errorf("%w: chain %s but the key is %s", chain.ErrInvalidCommit, c.Chain, key.DID())
	}
	if head.DID != "" && did != head.DID {
		return nil, fmt.Errorf("%w: did %s, the repository is %s", chain.ErrInvalidCommit, did, head.DID)
	}
	tree, err := loadTree(bs, head.Data)
	if err != nil {
		return nil, err
	}
	_, opPrev, _, err := applyOps(tree, c.Ops, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", chain.ErrInvalidCommit, err)
	}
	root, _, err := writeDiff(tree)
	if err != nil {
		return nil, err
	}
	rc := RepoCommit{DID: did, Data: root, Rev: rev}
	msg, err := rc.UnsignedBytes()
	if err != nil {
		return nil, err
	}
	if rc.Sig, err = key.Sign(msg); err != nil {
		return nil, fmt.Errorf("sign commit seq %d: %w", c.Seq, err)
	}
	if err := rc.verifySig(c.Chain); err != nil {
		return nil, fmt.Errorf("sign commit seq %d: %w: %v", c.Seq, chain.ErrSignature, err)
	}
	block, err := rc.Bytes()
	if err != nil {
		return nil, err
	}
	raw, err := encodeEnvelope(c, head.Data, opPrev, block)
	if err != nil {
		return nil, err
	}
	if _, err := DecodeEnvelope(raw); err != nil { // never hand the log what every replica refuses
		return nil, fmt.Errorf("%w: %v", chain.ErrInvalidCommit, err)
	}
	return raw, nil
}

// maxTIDMicros is the latest unix time, in microseconds, a TID can hold.
const maxTIDMicros = 1<<53 - 1

// NextRev is the revision of the next commit: the clock's TID, but never more than
// bound (the clock is bounded at proposal: a fast clock would otherwise carry forward
// through every later rev, and relays refuse revs far in the future) and always
// after prev.
//
// A reading a TID cannot hold (before 1970, or from 2255 on: a TID has 53 bits of
// unix microseconds) counts as the Unix epoch, so the rev is prev + 1, or the epoch's
// TID for a repository's first commit. indigo's NewTID masks the reading to its 53
// bits: a clock a minute before 1970 made a rev in 2255, which every later rev then
// had to follow (issue 38).
func NextRev(nowMicros, boundMicros int64, prev string, clockID uint) (string, error) {
	at := min(nowMicros, boundMicros)
	if at < 0 || at > maxTIDMicros {
		at = 0
	}
	t := syntax.NewTID(at, clockID)
	if prev == "" {
		return t.String(), nil
	}
	p, err := syntax.ParseTID(prev)
	if err != nil {
		return "", err
	}
	if t.Integer() <= p.Integer() {
		t = syntax.NewTIDFromInteger(p.Integer() + 1)
	}
	return t.String(), nil
}
