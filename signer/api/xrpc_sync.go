package api

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// The com.atproto.sync methods a relay or a backfill tool asks a host besides the
// repository itself: listRepos, getRepoStatus and getBlocks. A replica hosts one
// repository, always active (baton has no takedown, deactivation or suspension).

// Limits of listRepos and getBlocks.
const (
	MaxListRepos = 1000 // the lexicon's maximum (one page holds this chain's one repository)
	MaxGetBlocks = 100  // CIDs in one getBlocks: about 6.5 KB of query, under the request line's limit
)

// syncRepo is one repository in com.atproto.sync.listRepos's answer.
type syncRepo struct {
	DID    string `json:"did"`
	Head   string `json:"head"`
	Rev    string `json:"rev"`
	Active bool   `json:"active"`
}

// listRepos answers com.atproto.sync.listRepos: the one repository of this chain
// (none before its first commit), with its head commit's CID and rev, active. A
// single page always holds it, so no cursor is answered; a cursor given is read as
// a DID, and only a repository whose DID sorts after it is listed.
func (a *Server) listRepos(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "limit", "cursor")
	if err == nil && q.Has("limit") {
		if l, lerr := strconv.Atoi(q.Get("limit")); lerr != nil || l < 1 || l > MaxListRepos {
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "limit %q: an integer from 1 to %d", q.Get("limit"), MaxListRepos)
		}
	}
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	out := struct {
		Repos []syncRepo `json:"repos"`
	}{Repos: []syncRepo{}}
	err = a.readRepo("", func(_ atproto.Blocks, h atproto.Head) error {
		if q.Has("cursor") && h.DID <= q.Get("cursor") {
			return nil
		}
		head, err := atproto.CIDString(h.Commit)
		out.Repos = append(out.Repos, syncRepo{DID: h.DID, Head: head, Rev: h.Rev, Active: true})
		return err
	})
	if err == errNoCommit {
		err = nil // no repository to list yet
	}
	answerXRPC(w, err, out)
}

// getRepoStatus answers com.atproto.sync.getRepoStatus: the repository is active, at
// its head's rev.
func (a *Server) getRepoStatus(w http.ResponseWriter, r *http.Request) {
	q, err := didQuery(r)
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	var out struct {
		DID    string `json:"did"`
		Active bool   `json:"active"`
		Rev    string `json:"rev"`
	}
	err = a.readRepo(q.Get("did"), func(_ atproto.Blocks, h atproto.Head) error {
		out.DID, out.Active, out.Rev = h.DID, true, h.Rev
		return nil
	})
	answerXRPC(w, err, out)
}

// XRPCBlockNotFound is getBlocks' error for a CID this replica does not hold.
const XRPCBlockNotFound = "BlockNotFound"

// getBlocks answers com.atproto.sync.getBlocks: the blocks of the given CIDs (1 to
// MaxGetBlocks, each once; repeated cids parameters, as XRPC sends an array) in a CAR
// with no root, as the reference PDS answers, in the order asked. Any block of the
// repository's history is served (a replica keeps every block it stored); one it
// does not hold is BlockNotFound, naming it.
func (a *Server) getBlocks(w http.ResponseWriter, r *http.Request) {
	q, err := queryList(r, "cids", "did", "cids")
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	did, strs := q.Get("did"), q["cids"]
	switch {
	case did == "" || len(strs) == 0:
		err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "did and at least one cids are required")
	case len(strs) > MaxGetBlocks:
		err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "%d cids asked for: at most %d in one call", len(strs), MaxGetBlocks)
	default:
		err = checkRepoParam("did", did)
	}
	cids := make([][]byte, 0, len(strs))
	seen := make(map[string]bool, len(strs))
	for _, s := range strs {
		if err != nil {
			break
		}
		c, perr := cid.Decode(s)
		switch {
		case perr != nil:
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "cids %q: %v", s, perr)
		case seen[c.KeyString()]:
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "cids %q asked for twice", s)
		}
		seen[c.KeyString()] = true
		cids = append(cids, c.Bytes())
	}
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	var car bytes.Buffer
	err = a.readRepo(did, func(bs atproto.Blocks, _ atproto.Head) error {
		bl := make([]atproto.Block, 0, len(cids))
		for i, c := range cids {
			data, err := bs.Get(c)
			if err != nil {
				return err
			}
			if data == nil {
				return xerr(http.StatusBadRequest, XRPCBlockNotFound, "this repository holds no block %s", strs[i])
			}
			bl = append(bl, atproto.Block{CID: c, Data: data})
		}
		return atproto.WriteCAR(&car, nil, bl)
	})
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	writeCAR(w, car.Bytes())
}

// describeServer answers com.atproto.server.describeServer, which a relay asks a host
// before it crawls it (indigo's relay: HostClient.CheckHost): the server's DID is
// did:web of the host the request named (its Host header, a port as %3A), no handle
// domains, and an invite code required: no account can be made here.
func (a *Server) describeServer(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		writeXRPCError(w, err)
		return
	}
	if a.n.Log().View().ChainFormat() != intentlog.CommitFormatAtproto {
		writeXRPCError(w, errNotAtproto)
		return
	}
	did := "did:web:" + strings.ReplaceAll(r.Host, ":", "%3A")
	if _, err := syntax.ParseDID(did); err != nil || r.Host == "" {
		writeXRPCError(w, xerr(http.StatusBadRequest, XRPCInvalidRequest, "the request's host %q makes no did:web", r.Host))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		DID                  string   `json:"did"`
		AvailableUserDomains []string `json:"availableUserDomains"`
		InviteCodeRequired   bool     `json:"inviteCodeRequired"`
	}{DID: did, AvailableUserDomains: []string{}, InviteCodeRequired: true})
}
