package atproto

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
)

// WriteCAR writes a CAR v1 file with root as its one root (none when root is nil, as
// com.atproto.sync.getBlocks answers) and the blocks in order.
func WriteCAR(w io.Writer, root []byte, bl []Block) error {
	roots := []link{}
	if root != nil {
		roots = append(roots, root)
	}
	hdr, err := encMode.Marshal(struct {
		Roots   []link `cbor:"roots"`
		Version uint64 `cbor:"version"`
	}{Roots: roots, Version: 1})
	if err != nil {
		return fmt.Errorf("car header: %w", err)
	}
	if err := writeSection(w, nil, hdr); err != nil {
		return err
	}
	for _, b := range bl {
		if err := writeSection(w, b.CID, b.Data); err != nil {
			return err
		}
	}
	return nil
}

func writeSection(w io.Writer, c, data []byte) error {
	buf := binary.AppendUvarint(nil, uint64(len(c)+len(data)))
	buf = append(append(buf, c...), data...)
	_, err := w.Write(buf)
	return err
}

// RepoBlocksSince returns the blocks of the repository at head that the repository
// at base did not hold (every block when base is nil), in RepoBlocks' order: a
// getRepo diff. Blocks are never deleted, so base's tree is still there to walk.
func RepoBlocksSince(bs Blocks, head Head, base *Head) ([]Block, error) {
	all, err := RepoBlocks(bs, head)
	if err != nil || base == nil {
		return all, err
	}
	old, err := RepoBlocks(bs, *base)
	if err != nil {
		return nil, fmt.Errorf("the repository at rev %s: %w", base.Rev, err)
	}
	had := make(map[string]bool, len(old))
	for _, b := range old {
		had[string(b.CID)] = true
	}
	out := all[:0]
	for _, b := range all {
		if !had[string(b.CID)] {
			out = append(out, b)
		}
	}
	return out, nil
}

// RepoBlocks returns every block of the repository at head: the commit, the MST
// nodes and the records, in tree order (what a full-repository CAR holds).
func RepoBlocks(bs Blocks, head Head) ([]Block, error) {
	if head.Commit == nil {
		return nil, fmt.Errorf("empty repository")
	}
	get := func(c []byte) (Block, error) { return mustGet(bs, c) }
	commit, err := get(head.Commit)
	if err != nil {
		return nil, err
	}
	out := []Block{commit}
	// The nodes, depth first from the root, each node before its subtrees, then the
	// records they point at.
	var recs []Block
	var walk func(c []byte) error
	walk = func(c []byte) error {
		b, err := get(c)
		if err != nil {
			return err
		}
		out = append(out, b)
		nd, err := mst.NodeDataFromCBOR(bytes.NewReader(b.Data))
		if err != nil {
			return fmt.Errorf("MST node %x: %v", c, err)
		}
		if nd.Left != nil {
			if err := walk(nd.Left.Bytes()); err != nil {
				return err
			}
		}
		for _, e := range nd.Entries {
			r, err := get(e.Value.Bytes())
			if err != nil {
				return err
			}
			recs = append(recs, r)
			if e.Right != nil {
				if err := walk(e.Right.Bytes()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(head.Data); err != nil {
		return nil, err
	}
	return sortBlocksKeepFirst(out, recs), nil
}

// sortBlocksKeepFirst returns first then rest, without repeating a CID (two records
// may be equal).
func sortBlocksKeepFirst(first, rest []Block) []Block {
	seen := make(map[string]struct{}, len(first)+len(rest)) // lookups only
	out := make([]Block, 0, len(first)+len(rest))
	for _, b := range append(first, rest...) {
		if _, ok := seen[string(b.CID)]; ok {
			continue
		}
		seen[string(b.CID)] = struct{}{}
		out = append(out, b)
	}
	return out
}

// mustGet reads block c from bs; a block bs does not have is an error.
func mustGet(bs Blocks, c []byte) (Block, error) {
	b, err := bs.Get(c)
	if err == nil && b == nil {
		err = fmt.Errorf("block %x missing", c)
	}
	return Block{CID: c, Data: b}, err
}
