package atproto

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/fxamacker/cbor/v2"
	"github.com/ipfs/go-cid"
)

// What a replica serves of its repository (the XRPC endpoints of signer/api): the
// #commit event of any applied commit, a record with its MST proof, a record as JSON.
// Everything here reads the applied chain and the replica's blocks only, so every
// replica serves the same bytes.

// StepOf rebuilds the step of the applied commit e on top of the repository after
// prev (the commit before it; nil at seq 1), from the replica's blocks bs (a replica
// keeps every block it ever stored, so the tree at e's prevData is there). It runs
// Apply again, as every replica did: the step is the one the apply stored. trees
// caches the tree between consecutive commits (nil: none). It returns the head before
// e, which NewEvent takes with the step.
func StepOf(bs Blocks, prev *Envelope, e Envelope, trees *TreeCache) (Head, Step, error) {
	var ph Head
	if prev != nil {
		if prev.Commit.Seq+1 != e.Commit.Seq || !bytes.Equal(prev.Repo.Data, e.PrevData) {
			return ph, Step{}, fmt.Errorf("step of seq %d: seq %d is not the commit before it", e.Commit.Seq, prev.Commit.Seq)
		}
		ph = Head{DID: prev.Repo.DID, Data: prev.Repo.Data, Rev: prev.Repo.Rev, Commit: CIDOf(prev.Block)}
	} else if e.Commit.Seq != 1 {
		return ph, Step{}, fmt.Errorf("step of seq %d: the commit before it is needed", e.Commit.Seq)
	}
	st, err := trees.Apply(bs, ph, e)
	return ph, st, err
}

// Event stream frames (atproto's event stream wire protocol): a header map then a body
// map, both DAG-CBOR, in one binary WebSocket message.

type frameHeader struct {
	Op int64  `cbor:"op"`
	T  string `cbor:"t,omitempty"`
}

type frameOp struct {
	Action string `cbor:"action"`
	CID    *link  `cbor:"cid"` // null for a delete
	Path   string `cbor:"path"`
	Prev   *link  `cbor:"prev,omitempty"`
}

// frameCommit is com.atproto.sync.subscribeRepos#commit.
type frameCommit struct {
	Blobs    []link    `cbor:"blobs"`
	Blocks   []byte    `cbor:"blocks"`
	Commit   link      `cbor:"commit"`
	Ops      []frameOp `cbor:"ops"`
	PrevData *link     `cbor:"prevData,omitempty"`
	Rebase   bool      `cbor:"rebase"`
	Repo     string    `cbor:"repo"`
	Rev      string    `cbor:"rev"`
	Seq      int64     `cbor:"seq"`
	Since    *string   `cbor:"since"` // null for the first commit
	Time     string    `cbor:"time"`
	TooBig   bool      `cbor:"tooBig"`
}

// DatetimeLayout is atproto's datetime with milliseconds, in UTC.
const DatetimeLayout = "2006-01-02T15:04:05.000Z"

func optLink(b []byte) *link {
	if b == nil {
		return nil
	}
	l := link(b)
	return &l
}

// CommitFrame encodes ev as the #commit message of seq, at t (the commit's own time:
// every replica gives the same bytes).
func CommitFrame(seq uint64, ev Event, t time.Time) ([]byte, error) {
	if seq == 0 || seq > 1<<63-1 {
		return nil, fmt.Errorf("event seq %d out of range", seq)
	}
	body := frameCommit{Blobs: []link{}, Blocks: ev.Blocks, Commit: link(ev.Commit), Ops: make([]frameOp, 0, len(ev.Ops)),
		PrevData: optLink(ev.PrevData), Repo: ev.Repo, Rev: ev.Rev, Seq: int64(seq), Time: t.UTC().Format(DatetimeLayout)}
	if ev.Since != "" {
		body.Since = &ev.Since
	}
	for _, op := range ev.Ops {
		body.Ops = append(body.Ops, frameOp{Action: op.Action, CID: optLink(op.CID), Path: op.Path, Prev: optLink(op.Prev)})
	}
	return frame(frameHeader{Op: 1, T: "#commit"}, body)
}

// ErrorFrame encodes an error message (header op -1) with the error's name
// (FutureCursor, ConsumerTooSlow, ...) and a message.
func ErrorFrame(name, message string) []byte {
	b, err := frame(frameHeader{Op: -1}, struct {
		Error   string `cbor:"error"`
		Message string `cbor:"message"`
	}{name, message})
	if err != nil {
		panic("atproto: error frame: " + err.Error()) // two strings always encode
	}
	return b
}

func frame(h frameHeader, body any) ([]byte, error) {
	hb, err := encMode.Marshal(h)
	if err != nil {
		return nil, err
	}
	bb, err := encMode.Marshal(body)
	if err != nil {
		return nil, err
	}
	return append(hb, bb...), nil
}

// RecordProof returns the blocks that prove the record at path present (or absent) in
// the repository at head: the commit block, the MST nodes from the root down to where
// path is (or would be), and the record if present; com.atproto.sync.getRecord
// answers them as a CAR rooted at the commit. recCID is the record's (nil if absent).
func RecordProof(bs Blocks, head Head, path string) (bl []Block, recCID []byte, err error) {
	if head.Commit == nil {
		return nil, nil, fmt.Errorf("empty repository")
	}
	get := func(c []byte) (Block, error) { return mustGet(bs, c) }
	commit, err := get(head.Commit)
	if err != nil {
		return nil, nil, err
	}
	bl = []Block{commit}
	key := []byte(path)
	for node, depth := head.Data, 0; node != nil; depth++ {
		if depth > 256 {
			return nil, nil, fmt.Errorf("MST deeper than 256 levels")
		}
		b, err := get(node)
		if err != nil {
			return nil, nil, err
		}
		bl = append(bl, b)
		nd, err := mst.NodeDataFromCBOR(bytes.NewReader(b.Data))
		if err != nil {
			return nil, nil, fmt.Errorf("MST node %x: %v", node, err)
		}
		// The entries' keys in order; descend into the subtree left of the first key
		// after path (a node's Left holds the keys before its first entry, an entry's
		// Right those between it and the next).
		next := nd.Left
		var prevKey []byte
		found := false
		for _, e := range nd.Entries {
			if e.PrefixLen < 0 || int(e.PrefixLen) > len(prevKey) {
				return nil, nil, fmt.Errorf("MST node %x: bad prefix length", node)
			}
			k := append(append([]byte(nil), prevKey[:e.PrefixLen]...), e.KeySuffix...)
			prevKey = k
			if c := bytes.Compare(k, key); c == 0 {
				recCID, found = e.Value.Bytes(), true
				break
			} else if c > 0 {
				break
			}
			next = e.Right
		}
		if found {
			rec, err := get(recCID)
			if err != nil {
				return nil, nil, err
			}
			return append(bl, rec), recCID, nil
		}
		node = nil
		if next != nil {
			node = next.Bytes()
		}
	}
	return bl, nil, nil
}

// CIDString is c's text form (base32, "bafy...").
func CIDString(c []byte) (string, error) {
	cc, err := cid.Cast(c)
	if err != nil {
		return "", err
	}
	return cc.String(), nil
}

// RecordJSON converts a DAG-CBOR record to atproto's JSON form: a CID link becomes
// {"$link": "<cid>"}, bytes {"$bytes": "<base64, no padding>"}; maps, lists, strings,
// integers, booleans and null map over as they are (the keys sorted).
func RecordJSON(rec []byte) (json.RawMessage, error) {
	if err := CheckRecord(rec); err != nil {
		return nil, err
	}
	var v any
	if err := decMode.Unmarshal(rec, &v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeJSON(buf *bytes.Buffer, v any) error {
	str := func(s string) {
		b, _ := json.Marshal(s) // a string always encodes
		buf.Write(b)
	}
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case string:
		str(x)
	case uint64:
		buf.WriteString(strconv.FormatUint(x, 10))
	case int64:
		buf.WriteString(strconv.FormatInt(x, 10))
	case []byte:
		buf.WriteString(`{"$bytes":`)
		str(base64.RawStdEncoding.EncodeToString(x))
		buf.WriteByte('}')
	case cbor.Tag:
		c, err := linkContent(x)
		if err != nil {
			return err
		}
		s, err := CIDString(c)
		if err != nil {
			return err
		}
		buf.WriteString(`{"$link":`)
		str(s)
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the map's order is random: sort
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			str(k)
			buf.WriteByte(':')
			if err := writeJSON(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("value of type %T is not DAG-CBOR data", v)
	}
	return nil
}

// TreePool keeps the trees of up to n repository states (a TreeCache each), for a
// caller that rebuilds commits at several positions at once (streams backfilling from
// different cursors): an apply starts from the kept tree of its head's root if there
// is one, else it takes the least recently used slot (and loads the tree from the
// blocks). Memory: n trees. Like TreeCache it changes no outcome. Safe for concurrent
// use.
type TreePool struct {
	mu     sync.Mutex
	slots  []poolSlot
	clock  uint64
	misses uint64 // applies that loaded a non-empty tree (tests)
}

type poolSlot struct {
	root  []byte // the root the slot's tree was left at
	used  uint64
	cache *TreeCache
}

// NewTreePool returns a pool of n trees (at least 1).
func NewTreePool(n int) *TreePool {
	p := &TreePool{slots: make([]poolSlot, max(1, n))}
	for i := range p.slots {
		p.slots[i].cache = &TreeCache{}
	}
	return p
}

// StepOf is the package's StepOf with a tree from the pool.
func (p *TreePool) StepOf(bs Blocks, prev *Envelope, e Envelope) (Head, Step, error) {
	p.mu.Lock()
	p.clock++
	s := &p.slots[0]
	for i := range p.slots {
		c := &p.slots[i]
		if c.root != nil && bytes.Equal(c.root, e.PrevData) {
			s = c
			break
		}
		if c.used < s.used {
			s = c
		}
	}
	if e.PrevData != nil && !bytes.Equal(s.root, e.PrevData) {
		p.misses++
	}
	s.used, s.root = p.clock, e.Repo.Data // the slot's tree after this apply
	p.mu.Unlock()
	return StepOf(bs, prev, e, s.cache)
}
