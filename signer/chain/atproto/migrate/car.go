package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// CARRecord is one record of a repository CAR: its path and its DAG-CBOR bytes (whose
// CID, atproto.CIDOf(Value), is the one the repository's MST names).
type CARRecord struct {
	Path  string
	Value []byte
}

// CARRepo is what ReadCARRecords reads of a repository CAR.
type CARRepo struct {
	DID     string // the head commit's DID
	Rev     string // the head commit's rev
	Records []CARRecord
}

// ReadCARRecords reads a whole repository CAR (com.atproto.sync.getRepo, or `baton
// export --car`) with indigo and returns its records in MST (path) order, each
// checked as a record the atproto format takes (atproto.CheckOp) and against the CID its MST names.
// It does not check the commit's signature (the key of the PDS it came from need not
// be the chain key). Used to bring an account's records onto a chain: putting them
// gives the same paths and CIDs.
func ReadCARRecords(ctx context.Context, r io.Reader) (CARRepo, error) {
	c, rp, err := repo.LoadRepoFromCAR(ctx, r)
	if err != nil {
		return CARRepo{}, fmt.Errorf("read the repository CAR: %w", err)
	}
	out := CARRepo{DID: c.DID, Rev: c.Rev}
	err = rp.MST.Walk(func(key []byte, want cid.Cid) error {
		path := string(key)
		nsid, rkey, err := syntax.ParseRepoPath(path)
		if err != nil {
			return fmt.Errorf("record %q: %w", path, err)
		}
		b, got, err := rp.GetRecordBytes(ctx, nsid, rkey)
		if err != nil {
			return fmt.Errorf("record %s: %w", path, err)
		}
		if got == nil || !got.Equals(want) || !bytes.Equal(atproto.CIDOf(b), want.Bytes()) {
			return fmt.Errorf("record %s: its bytes are not the CID the tree names", path)
		}
		if err := atproto.CheckOp(chain.Op{Kind: chain.Put, Path: path, Value: b}); err != nil {
			return fmt.Errorf("record %s: %w", path, err)
		}
		out.Records = append(out.Records, CARRecord{Path: path, Value: b})
		return nil
	})
	if err != nil {
		return CARRepo{}, err
	}
	return out, nil
}

// ErrDIDDocument: a DID document does not name the chain key as the repository DID's
// #atproto key.
var ErrDIDDocument = errors.New("the DID document does not make the chain key the repository's signing key")

// CheckDIDDocument checks a DID document the user fetched (for a did:plc, what
// https://plc.directory/<did> serves) offline: it is repoDID's, and its #atproto
// verification method is the chain key keyDID. baton never fetches it: a document
// passed here may be stale, and the PLC directory stays the authority.
func CheckDIDDocument(doc []byte, repoDID, keyDID string) error {
	var d identity.DIDDocument
	if err := json.Unmarshal(doc, &d); err != nil {
		return fmt.Errorf("%w: not a DID document: %v", ErrDIDDocument, err)
	}
	if d.DID.String() != repoDID {
		return fmt.Errorf("%w: it is the document of %q, not %s", ErrDIDDocument, d.DID.String(), repoDID)
	}
	ident := identity.ParseIdentity(&d)
	pub, err := ident.PublicKey()
	if err != nil {
		return fmt.Errorf("%w: no usable #atproto key in it: %v", ErrDIDDocument, err)
	}
	if got := pub.DIDKey(); got != keyDID {
		return fmt.Errorf("%w: its #atproto key is %s, not the chain key %s: update the DID (a PLC operation signed with a rotation key) or import that key", ErrDIDDocument, got, keyDID)
	}
	return nil
}
