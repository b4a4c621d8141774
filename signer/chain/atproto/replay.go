package atproto

import (
	"bytes"
	"fmt"
	"io"

	"github.com/batonhq/baton/signer/chain"
)

// Replayer rebuilds a repository from a chain's commits (an export), checking each
// one as the apply does: the envelope and its signature under chain, seq and prev
// links, epochs that never decrease, and the repository step. Any replica's export
// replays to the same repository. It is not safe for concurrent use.
type Replayer struct {
	chain string
	bs    MemBlocks
	head  Head
	seq   uint64
	hash  [chain.HashSize]byte
	epoch uint64
}

// NewReplayer returns a replayer for the chain whose key is the did:key chainDID; with
// "" the first commit's chain is taken (the export is then checked for consistency,
// not for whose it is).
func NewReplayer(chainDID string) *Replayer {
	return &Replayer{chain: chainDID, bs: MemBlocks{}}
}

// Next applies the next commit (seq 1 first).
func (r *Replayer) Next(raw []byte) (Step, error) {
	e, err := VerifyEnvelope(raw)
	if err != nil {
		return Step{}, err
	}
	c := e.Commit
	if r.chain == "" && r.seq == 0 {
		r.chain = c.Chain
	}
	switch {
	case c.Chain != r.chain:
		return Step{}, verr(c.Seq, chain.ReasonWrongChain, "chain %s, want %s", c.Chain, r.chain)
	case c.Seq != r.seq+1:
		return Step{}, verr(c.Seq, chain.ReasonBadSeq, "seq %d after %d", c.Seq, r.seq)
	case r.seq > 0 && !bytes.Equal(c.Prev, r.hash[:]):
		return Step{}, verr(c.Seq, chain.ReasonBadPrev, "prev is not the hash of seq %d", r.seq)
	case c.Epoch < r.epoch:
		return Step{}, verr(c.Seq, chain.ReasonEpochDecreased, "epoch %d after %d", c.Epoch, r.epoch)
	}
	st, err := Apply(r.bs, r.head, e)
	if err != nil {
		return st, err
	}
	r.bs.Put(st.Blocks)
	r.head, r.seq, r.hash, r.epoch = st.Head, c.Seq, Hash(raw), c.Epoch
	return st, nil
}

// Head returns the repository's head after the last commit.
func (r *Replayer) Head() Head { return r.head }

// Blocks returns the repository's block store.
func (r *Replayer) Blocks() Blocks { return r.bs }

// WriteCAR writes the whole repository at its head as a CAR file.
func (r *Replayer) WriteCAR(w io.Writer) error {
	bl, err := RepoBlocks(r.bs, r.head)
	if err != nil {
		return fmt.Errorf("export repository: %w", err)
	}
	return WriteCAR(w, r.head.Commit, bl)
}

// MemBlocks is an in-memory block store.
type MemBlocks map[string][]byte

// Get returns the block with CID c, nil if absent.
func (m MemBlocks) Get(c []byte) ([]byte, error) { return m[string(c)], nil }

// Put stores blocks.
func (m MemBlocks) Put(bl []Block) {
	for _, b := range bl {
		m[string(b.CID)] = b.Data
	}
}

// GetRecord returns the record at collection/rkey and its CID (nil, nil if absent):
// com.atproto.repo.getRecord on a repository.
func GetRecord(bs Blocks, head Head, path string) (rec, cid []byte, err error) {
	if head.Data == nil {
		return nil, nil, nil
	}
	tree, err := loadTree(bs, head.Data)
	if err != nil {
		return nil, nil, err
	}
	c, err := tree.Get([]byte(path))
	if err != nil || c == nil {
		return nil, nil, err
	}
	rec, err = bs.Get(c.Bytes())
	if err == nil && rec == nil {
		err = fmt.Errorf("record block %s missing", c)
	}
	return rec, c.Bytes(), err
}

// ChainVerifier checks an export of an atproto chain commit by commit as
// chain.ChainVerifier does for baton's format (Next, Head), replaying the repository.
type ChainVerifier struct {
	rp   *Replayer
	head chain.Head
	err  error
}

// NewChainVerifier returns a verifier for the chain whose key is the did:key chainDID,
// from seq 1.
func NewChainVerifier(chainDID string) *ChainVerifier {
	return &ChainVerifier{rp: NewReplayer(chainDID)}
}

// Next checks the next commit (Replayer.Next) and returns its fence and ops. After
// the first error every later call returns it again (as chain.ChainVerifier's).
func (v *ChainVerifier) Next(raw []byte) (chain.Commit, error) {
	if v.err != nil {
		return chain.Commit{}, v.err
	}
	if _, err := v.rp.Next(raw); err != nil {
		v.err = err
		return chain.Commit{}, err
	}
	e, err := DecodeEnvelope(raw)
	if err != nil {
		return chain.Commit{}, err
	}
	v.head = chain.Head{Seq: e.Commit.Seq, Hash: Hash(raw), Epoch: e.Commit.Epoch, Signer: e.Commit.Signer}
	return e.Commit, nil
}

// Head is the last commit checked.
func (v *ChainVerifier) Head() chain.Head { return v.head }

// Repo is the repository's head after the last commit checked.
func (v *ChainVerifier) Repo() Head { return v.rp.Head() }
