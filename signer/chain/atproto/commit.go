package atproto

import (
	"bytes"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/fxamacker/cbor/v2"
)

// RepoVersion is the atproto repository commit version this format writes.
const RepoVersion = 3

// RepoCommit is an atproto repository commit v3.
type RepoCommit struct {
	DID  string // the repository's DID (did:plc, did:web; did:key in tests)
	Data []byte // CID of the MST root
	Rev  string // TID, strictly increasing
	Sig  []byte // 64-byte low-S signature over the encoding without sig
}

// commitWire is the DAG-CBOR shape. prev is always present as null: omitting it
// changes the signed bytes and atproto's verifiers would refuse the signature.
type commitWire struct {
	DID     string `cbor:"did"`
	Version int64  `cbor:"version"`
	Data    link   `cbor:"data"`
	Rev     string `cbor:"rev"`
	Prev    *link  `cbor:"prev"`
	Sig     []byte `cbor:"sig,omitempty"`
}

func (c *RepoCommit) wire(withSig bool) commitWire {
	w := commitWire{DID: c.DID, Version: RepoVersion, Data: link(c.Data), Rev: c.Rev}
	if withSig {
		w.Sig = c.Sig
	}
	return w
}

// UnsignedBytes returns the bytes the signature covers.
func (c *RepoCommit) UnsignedBytes() ([]byte, error) { return encMode.Marshal(c.wire(false)) }

// Bytes returns the commit block (signed).
func (c *RepoCommit) Bytes() ([]byte, error) { return encMode.Marshal(c.wire(true)) }

var commitKeys = [...]string{"did", "version", "data", "rev", "prev", "sig"}

// DecodeRepoCommit parses a signed commit block strictly: exactly the six keys, version
// 3, prev null, data a CID link, rev a TID, a 64-byte sig, canonical bytes.
func DecodeRepoCommit(b []byte) (RepoCommit, error) {
	var c RepoCommit
	var m map[string]cbor.RawMessage
	if err := decMode.Unmarshal(b, &m); err != nil || m == nil {
		return c, fmt.Errorf("commit block is not a CBOR map")
	}
	if len(m) != len(commitKeys) {
		return c, fmt.Errorf("commit block has %d keys, want %d", len(m), len(commitKeys))
	}
	for _, k := range commitKeys {
		if _, ok := m[k]; !ok {
			return c, fmt.Errorf("commit block lacks %q", k)
		}
	}
	var version int64
	if err := decMode.Unmarshal(m["version"], &version); err != nil || version != RepoVersion {
		return c, fmt.Errorf("commit version is not %d", RepoVersion)
	}
	if !bytes.Equal(m["prev"], []byte{0xf6}) {
		return c, fmt.Errorf("commit prev is not null")
	}
	if err := decMode.Unmarshal(m["did"], &c.DID); err != nil {
		return c, fmt.Errorf("commit did: %v", err)
	}
	if _, err := syntax.ParseDID(c.DID); err != nil {
		return c, fmt.Errorf("commit did: %v", err)
	}
	if err := decMode.Unmarshal(m["rev"], &c.Rev); err != nil {
		return c, fmt.Errorf("commit rev: %v", err)
	}
	if _, err := syntax.ParseTID(c.Rev); err != nil {
		return c, fmt.Errorf("commit rev: %v", err)
	}
	data, err := parseLink(m["data"])
	if err != nil || len(data) != CIDSize || !bytes.Equal(data[:4], cidPrefix) {
		return c, fmt.Errorf("commit data is not a dag-cbor sha2-256 CID link")
	}
	c.Data = data
	if err := decMode.Unmarshal(m["sig"], &c.Sig); err != nil || len(c.Sig) != 64 {
		return c, fmt.Errorf("commit sig is not 64 bytes")
	}
	re, err := c.Bytes()
	if err != nil || !bytes.Equal(re, b) {
		return c, fmt.Errorf("commit block is not canonical DAG-CBOR")
	}
	return c, nil
}

// verifySig checks c's signature under the did:key chainDID (strict: low-S only).
func (c *RepoCommit) verifySig(chainDID string) error {
	pub, err := parsePub(chainDID)
	if err != nil {
		return err
	}
	msg, err := c.UnsignedBytes()
	if err != nil {
		return err
	}
	return pub.HashAndVerify(msg, c.Sig)
}
