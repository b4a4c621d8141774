package atproto

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
)

// CARRecord is one record of a repository CAR: its path and its DAG-CBOR bytes (whose
// CID, CIDOf(Value), is the one the repository's MST names).
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
// checked as a record this format takes (CheckOp) and against the CID its MST names.
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
		if got == nil || !got.Equals(want) || !bytes.Equal(CIDOf(b), want.Bytes()) {
			return fmt.Errorf("record %s: its bytes are not the CID the tree names", path)
		}
		if err := CheckRecord(b); err != nil {
			return fmt.Errorf("record %s: %w", path, err)
		}
		if err := checkPath(path); err != nil {
			return err
		}
		out.Records = append(out.Records, CARRecord{Path: path, Value: b})
		return nil
	})
	if err != nil {
		return CARRepo{}, err
	}
	return out, nil
}
