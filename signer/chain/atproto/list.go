package atproto

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"
)

// Listings of a repository (com.atproto.repo.listRecords, describeRepo's collections)
// read the MST nodes on the way to the keys they need, never the whole tree: a page
// of n records reads about depth + n/fanout nodes, the collections one seek each.

// ListedRecord is one record of a listing.
type ListedRecord struct {
	Path string // collection/rkey
	CID  []byte
	Rec  []byte // the record's DAG-CBOR bytes
}

// ListRecords returns up to limit records of collection in the repository at head, in
// rkey order: descending (the newest TIDs first, as atproto's reference PDS lists
// them), ascending with asc. cursor, when not empty, is an rkey: only the records
// after it in that order are listed. more says whether records follow the last one.
func ListRecords(bs Blocks, head Head, collection, cursor string, limit int, asc bool) (recs []ListedRecord, more bool, err error) {
	if limit <= 0 || collection == "" {
		return nil, false, fmt.Errorf("list records: limit %d of collection %q", limit, collection)
	}
	// Every key of the collection is in (collection + "/", collection + "0"): '0'
	// follows '/' and an rkey is never empty.
	lo, hi := []byte(collection+"/"), []byte(collection+"0")
	if cursor != "" {
		if asc {
			lo = []byte(collection + "/" + cursor)
		} else {
			hi = []byte(collection + "/" + cursor)
		}
	}
	var keys []ListedRecord
	err = walkKeys(bs, head.Data, lo, hi, !asc, func(k, c []byte) bool {
		if len(keys) == limit {
			more = true
			return false
		}
		keys = append(keys, ListedRecord{Path: string(k), CID: c})
		return true
	})
	if err != nil {
		return nil, false, err
	}
	for i := range keys {
		b, err := mustGet(bs, keys[i].CID)
		if err != nil {
			return nil, false, err
		}
		keys[i].Rec = b.Data
	}
	return keys, more, nil
}

// Collections returns the collections (NSIDs) with at least one record in the
// repository at head, sorted: one seek in the tree per collection.
func Collections(bs Blocks, head Head) ([]string, error) {
	var out []string
	var lo []byte
	for {
		var next string
		err := walkKeys(bs, head.Data, lo, nil, false, func(k, _ []byte) bool {
			next = string(k)
			return false
		})
		if err != nil {
			return nil, err
		}
		if next == "" {
			break
		}
		coll, _, ok := strings.Cut(next, "/")
		if !ok {
			return nil, fmt.Errorf("MST key %q is not collection/rkey", next)
		}
		out = append(out, coll)
		// Past every key of coll: rkey bytes are printable ASCII, below 0xff.
		lo = []byte(coll + "/\xff")
	}
	slices.Sort(out) // key order puts "a.b.c/..." before "a.b/...": sort the NSIDs
	return out, nil
}

// walkKeys calls fn with each key k of the MST rooted at root such that lo < k < hi
// (nil: unbounded), and its value, in ascending key order (descending with desc),
// until fn returns false. It reads only the nodes whose key ranges meet (lo, hi).
func walkKeys(bs Blocks, root, lo, hi []byte, desc bool, fn func(k, v []byte) bool) error {
	if root == nil {
		return nil
	}
	_, err := walkNode(bs, root, lo, hi, desc, fn, 0)
	return err
}

// walkNode walks one node (see walkKeys); stop: fn asked to stop, or the walk is past
// the bound it moves towards.
func walkNode(bs Blocks, node, lo, hi []byte, desc bool, fn func(k, v []byte) bool, depth int) (stop bool, err error) {
	if depth > 256 {
		return false, fmt.Errorf("MST deeper than 256 levels")
	}
	b, err := mustGet(bs, node)
	if err != nil {
		return false, err
	}
	nd, err := mst.NodeDataFromCBOR(bytes.NewReader(b.Data))
	if err != nil {
		return false, fmt.Errorf("MST node %x: %v", node, err)
	}
	// The node as a sequence: subtree 0 (Left), key 0, subtree 1 (key 0's Right),
	// key 1, ...; subtree i holds the keys between key i-1 and key i.
	type entry struct{ key, val []byte }
	ents := make([]entry, 0, len(nd.Entries))
	subs := make([][]byte, 0, len(nd.Entries)+1)
	subs = append(subs, cidBytes(nd.Left))
	var prev []byte
	for _, e := range nd.Entries {
		if e.PrefixLen < 0 || int(e.PrefixLen) > len(prev) {
			return false, fmt.Errorf("MST node %x: bad prefix length", node)
		}
		k := append(append([]byte(nil), prev[:e.PrefixLen]...), e.KeySuffix...)
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return false, fmt.Errorf("MST node %x: keys out of order", node)
		}
		prev = k
		ents = append(ents, entry{k, e.Value.Bytes()})
		subs = append(subs, cidBytes(e.Right))
	}
	// below(i) and above(i): the bounds of subtree i (nil: none).
	below := func(i int) []byte {
		if i == 0 {
			return nil
		}
		return ents[i-1].key
	}
	above := func(i int) []byte {
		if i == len(ents) {
			return nil
		}
		return ents[i].key
	}
	sub := func(i int) (bool, error) {
		a, z := below(i), above(i)
		if subs[i] == nil || (lo != nil && z != nil && bytes.Compare(z, lo) <= 0) || (hi != nil && a != nil && bytes.Compare(a, hi) >= 0) {
			return false, nil
		}
		return walkNode(bs, subs[i], lo, hi, desc, fn, depth+1)
	}
	key := func(i int) bool {
		k := ents[i].key
		switch {
		case !desc && hi != nil && bytes.Compare(k, hi) >= 0:
			return true // past the upper bound: done
		case desc && lo != nil && bytes.Compare(k, lo) <= 0:
			return true
		case (lo != nil && bytes.Compare(k, lo) <= 0) || (hi != nil && bytes.Compare(k, hi) >= 0):
			return false
		}
		return !fn(k, ents[i].val)
	}
	if !desc {
		for i := range ents {
			if stop, err := sub(i); stop || err != nil {
				return stop, err
			}
			if key(i) {
				return true, nil
			}
		}
		return sub(len(ents))
	}
	for i := len(ents); i > 0; i-- {
		if stop, err := sub(i); stop || err != nil {
			return stop, err
		}
		if key(i - 1) {
			return true, nil
		}
	}
	return sub(0)
}

func cidBytes(c *cid.Cid) []byte {
	if c == nil {
		return nil
	}
	return c.Bytes()
}
