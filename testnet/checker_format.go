package testnet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

// FormatOf is the commit format of the chain whose key is did (signer.FormatOfDID):
// the checker and the signature audit verify, hash and chain commits through it.
// A did no format takes gives baton's (whose verification then refuses it).
func FormatOf(did string) chain.Format {
	if f, err := signer.FormatOfDID(did); err == nil {
		return f
	}
	return chain.Baton
}

var errRepo = errors.New("the stored repository is not the chain's")

// verifyDevice checks d's chain in format f from seq 1 (chain.NewStepper) and, on an
// atproto chain whose repository head was read, that the head is the one the chain
// replays to.
func verifyDevice(f chain.Format, did string, d DeviceChain) error {
	s, err := chain.NewStepper(f, did)
	if err != nil {
		return err
	}
	for i, raw := range d.Commits {
		if _, err := s.Next(raw); err != nil {
			if ve, ok := err.(*chain.VerifyError); ok && ve.Index == 0 {
				ve.Index = i
			}
			return err
		}
	}
	r, ok := s.(interface{ Repo() atproto.Head })
	if !ok || d.Repo == nil {
		return nil
	}
	want, err := atproto.EncodeHead(r.Repo())
	if err != nil {
		return err
	}
	if !bytes.Equal(d.Repo, want) {
		got, _ := atproto.DecodeHead(d.Repo)
		return fmt.Errorf("%w: root %x rev %s, the chain's %d commits replay to root %x rev %s", errRepo,
			got.Data, got.Rev, len(d.Commits), r.Repo().Data, r.Repo().Rev)
	}
	return nil
}

// readRepo reads n's stored repository head with its chain, consistently: the head's
// commit must be the last commit read (a replica applying meanwhile is read again, a
// bounded number of times).
func readRepo(n *node.Node, dc *DeviceChain, readChain func() error) error {
	for try := 0; ; try++ {
		if err := readChain(); err != nil {
			return err
		}
		var head []byte
		err := n.Log().ReadFormat(func(st intentlog.FormatStore) error {
			head = append([]byte(nil), st.Head()...)
			return nil
		})
		if err != nil {
			return err
		}
		h, err := atproto.DecodeHead(head)
		if err != nil {
			return err
		}
		var last []byte
		if k := len(dc.Commits); k > 0 {
			e, err := atproto.DecodeEnvelope(dc.Commits[k-1])
			if err != nil {
				return err
			}
			last = atproto.CIDOf(e.Block)
		}
		if bytes.Equal(h.Commit, last) || try == 20 {
			dc.Repo = head
			return nil
		}
		// The replica applied between the two reads: read again once it applies
		// more, or after a short while.
		select {
		case <-n.Log().Watch():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// chainKeyGen returns the generator of a chain key for a cluster of format ("" or
// "baton": Ed25519, "atproto": P-256; the genesis's format follows the key's type).
func chainKeyGen(format string) (func() (chain.Key, error), error) {
	switch format {
	case "", "baton":
		return func() (chain.Key, error) { return chain.GenerateKey(rand.Reader) }, nil
	case "atproto":
		return func() (chain.Key, error) { return atproto.GenerateKey() }, nil
	}
	return nil, fmt.Errorf("%w: format %q (have baton, atproto)", ErrBadConfig, format)
}

var recordEnc = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// LoadIntent is the intent the load generator submits under id on a chain of format
// f: a put of drill/<id> (baton's), or of a DAG-CBOR record at
// app.baton.drill/<id> (atproto: a new record per intent).
func LoadIntent(f chain.Format, id string) intentlog.Intent {
	if f.ID() != chain.FormatAtproto {
		return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "drill/" + id, Value: []byte(id)}
	}
	rec, err := recordEnc.Marshal(map[string]any{"$type": "app.baton.drill", "id": id})
	if err != nil {
		panic(err) // a map of two strings always encodes
	}
	return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.baton.drill/" + id, Value: rec}
}

// linkKeys finds, along one device's chain, two commits that name one parent by a
// link other than prev: on an atproto chain one rev or one prevData (atproto.Links).
// Baton's format has no other link.
type linkKeys struct{ at *atproto.Links }

func newLinkKeys() *linkKeys { return &linkKeys{at: atproto.NewLinks()} }

// add books the commit raw at seq and returns what it shares with an earlier one.
func (k *linkKeys) add(f chain.Format, seq uint64, raw []byte) []string {
	if f.ID() != chain.FormatAtproto {
		return nil
	}
	return k.at.Add(seq, raw)
}

// procRepoHead sets dc.Repo to the repository head a `baton run` process serves
// (com.atproto.sync.getLatestCommit over its API), consistently with dc.Commits as
// readRepo does in-process: while the served head is not the last commit read (the
// device applied meanwhile), the chain is read on from there, a bounded number of
// times. The head's DID, data and rev are the commit block's whose CID the device
// serves (the CID is that block's hash); a head that is no commit of the chain read
// keeps only its CID and rev, and the checker reports it.
func procRepoHead(ctx context.Context, c *api.Client, dc *DeviceChain) error {
	if len(dc.Commits) == 0 {
		return nil
	}
	for try := 0; ; try++ {
		last, err := atproto.DecodeEnvelope(dc.Commits[len(dc.Commits)-1])
		if err != nil {
			return err
		}
		body, err := c.XRPC(ctx, "com.atproto.sync.getLatestCommit", url.Values{"did": {last.Repo.DID}})
		if err != nil {
			return fmt.Errorf("the served repository head: %w", err)
		}
		var lc struct{ CID, Rev string }
		if err := json.Unmarshal(body, &lc); err != nil {
			return fmt.Errorf("the served repository head %q: %w", body, err)
		}
		served, err := cid.Decode(lc.CID)
		if err != nil {
			return fmt.Errorf("the served repository head %q: %w", body, err)
		}
		h := atproto.Head{DID: last.Repo.DID, Rev: lc.Rev, Commit: served.Bytes()}
		if bytes.Equal(h.Commit, atproto.CIDOf(last.Block)) {
			h.Data, h.Rev = last.Repo.Data, last.Repo.Rev
		} else if try < 20 {
			// Read the commits applied since, then the head again.
			n := len(dc.Commits)
			for ac := range c.Commits(ctx, last.Commit.Seq+1, false) {
				if ac.Err != nil {
					return ac.Err
				}
				dc.Commits = append(dc.Commits, ac.Raw)
			}
			if len(dc.Commits) == n { // applied between the two reads of the head
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
			continue
		}
		dc.Repo, err = atproto.EncodeHead(h)
		return err
	}
}
