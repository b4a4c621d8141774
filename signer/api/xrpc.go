package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

// The XRPC endpoints of an atproto chain (com.atproto.sync.* and
// com.atproto.repo.getRecord, listRecords, describeRepo): what a client of atproto asks a PDS, answered from this
// replica's applied repository. Every replica answers the same bytes. They sit behind
// the same listeners, token check and limits as /v1, and alone on the public
// read-only listener (Config.XRPCAddr, no token). Errors follow XRPC's shape
// ({"error": <Name>, "message"}), with atproto's names.

// XRPC error names.
const (
	XRPCInvalidRequest  = "InvalidRequest"
	XRPCRecordNotFound  = "RecordNotFound"
	XRPCRepoNotFound    = "RepoNotFound"
	XRPCNotImplemented  = "MethodNotImplemented"
	XRPCInternal        = "InternalServerError"
	XRPCFutureCursor    = "FutureCursor"
	XRPCConsumerTooSlow = "ConsumerTooSlow"
	XRPCTooManyStreams  = "TooManyStreams"
)

// xrpcError is an XRPC error answer.
type xrpcError struct {
	status int
	name   string
	msg    string
}

func (e *xrpcError) Error() string { return e.name + ": " + e.msg }

func xerr(status int, name, format string, args ...any) *xrpcError {
	return &xrpcError{status: status, name: name, msg: fmt.Sprintf(format, args...)}
}

func writeXRPCError(w http.ResponseWriter, err error) {
	var xe *xrpcError
	switch {
	case errors.As(err, &xe):
	case errors.Is(err, node.ErrBadRequest):
		xe = xerr(http.StatusBadRequest, XRPCInvalidRequest, "%s", Message(err))
	default:
		code, status := Code(err)
		if status < 500 {
			xe = xerr(status, XRPCInvalidRequest, "%s", Message(err))
		} else {
			xe = xerr(status, XRPCInternal, "%s: %s", code, Message(err))
		}
	}
	writeJSON(w, xe.status, errorJSON{Error: xe.name, Message: xe.msg})
}

// routeXRPC registers the XRPC methods on mux (the API's, or the public listener's:
// every method here only reads).
func (a *Server) routeXRPC(mux *http.ServeMux) {
	x := func(name string, h http.HandlerFunc) {
		routeOn(mux, "/xrpc/"+name, handlers{http.MethodGet: h}, true)
	}
	x("com.atproto.sync.getRecord", a.syncGetRecord)
	x("com.atproto.repo.getRecord", a.repoGetRecord)
	x("com.atproto.repo.listRecords", a.listRecords)
	x("com.atproto.repo.describeRepo", a.describeRepo)
	x("com.atproto.sync.getLatestCommit", a.getLatestCommit)
	x("com.atproto.sync.getRepo", a.getRepo)
	x("com.atproto.sync.subscribeRepos", a.subscribeRepos) // xrpc_stream.go
	x("com.atproto.sync.listRepos", a.listRepos)           // xrpc_sync.go
	x("com.atproto.sync.getRepoStatus", a.getRepoStatus)
	x("com.atproto.sync.getBlocks", a.getBlocks)
	x("com.atproto.server.describeServer", a.describeServer)
	mux.HandleFunc("/xrpc/{method}", func(w http.ResponseWriter, r *http.Request) {
		writeXRPCError(w, xerr(http.StatusNotImplemented, XRPCNotImplemented, "%s is not served here", r.PathValue("method")))
	})
}

// errNotAtproto answers every XRPC method on a chain of baton's own format.
var errNotAtproto = xerr(http.StatusBadRequest, XRPCRepoNotFound,
	"this chain's commits are in baton's own format, not atproto's: it has no atproto repository")

// errNoCommit answers every XRPC method before the chain's first commit.
var errNoCommit = xerr(http.StatusBadRequest, XRPCRepoNotFound, "the repository has no commit yet")

// readRepo calls fn with the applied repository (in one read transaction), or answers
// RepoNotFound: not an atproto chain, no commit yet, or did given and not the
// repository's.
func (a *Server) readRepo(did string, fn func(bs atproto.Blocks, h atproto.Head) error) error {
	log := a.n.Log()
	if log.View().ChainFormat() != intentlog.CommitFormatAtproto {
		return errNotAtproto
	}
	return log.ReadFormat(func(st intentlog.FormatStore) error {
		h, err := atproto.DecodeHead(st.Head())
		switch {
		case err != nil:
			return err
		case h.Commit == nil:
			return errNoCommit
		case did != "" && did != h.DID:
			return xerr(http.StatusBadRequest, XRPCRepoNotFound, "this chain's repository is %s, not %s", h.DID, did)
		}
		return fn(formatBlocks{st}, h)
	})
}

// formatBlocks reads a repository's blocks from the format state.
type formatBlocks struct{ st intentlog.FormatStore }

func (b formatBlocks) Get(cid []byte) ([]byte, error) { return b.st.Block(cid), nil }

// recordParams reads did (or repo, for repo.getRecord), collection and rkey.
func recordParams(r *http.Request, repoKey string, extra ...string) (did, path string, err error) {
	q, err := query(r, append([]string{repoKey, "collection", "rkey"}, extra...)...)
	if err != nil {
		return "", "", err
	}
	did, coll, rkey := q.Get(repoKey), q.Get("collection"), q.Get("rkey")
	if did == "" || coll == "" || rkey == "" {
		return "", "", xerr(http.StatusBadRequest, XRPCInvalidRequest, "%s, collection and rkey are required", repoKey)
	}
	if err := checkRepoParam(repoKey, did); err != nil {
		return "", "", err
	}
	path = coll + "/" + rkey
	if _, _, err := syntax.ParseRepoPath(path); err != nil {
		return "", "", xerr(http.StatusBadRequest, XRPCInvalidRequest, "collection/rkey: %v", err)
	}
	return did, path, nil
}

// syncGetRecord answers com.atproto.sync.getRecord: a CAR rooted at the head commit
// with the commit block, the MST nodes from the root to the record's key and the
// record: a proof of the record against the signed commit. An absent record is
// RecordNotFound.
func (a *Server) syncGetRecord(w http.ResponseWriter, r *http.Request) {
	did, path, err := recordParams(r, "did")
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	var car bytes.Buffer
	err = a.readRepo(did, func(bs atproto.Blocks, h atproto.Head) error {
		bl, cid, err := atproto.RecordProof(bs, h, path)
		if err != nil {
			return err
		}
		if cid == nil {
			return xerr(http.StatusBadRequest, XRPCRecordNotFound, "no record at %s", path)
		}
		return atproto.WriteCAR(&car, h.Commit, bl)
	})
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	writeCAR(w, car.Bytes())
}

func writeCAR(w http.ResponseWriter, car []byte) {
	w.Header().Set("Content-Type", "application/vnd.ipld.car")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(car)
}

// repoGetRecordOutput is com.atproto.repo.getRecord's answer.
type repoGetRecordOutput struct {
	URI   string          `json:"uri"`
	CID   string          `json:"cid"`
	Value json.RawMessage `json:"value"`
}

// repoGetRecord answers com.atproto.repo.getRecord: the record as JSON (atproto's
// data model: $link, $bytes) with its at:// URI and CID. The optional cid parameter
// asks for that version: only the current one is kept, another is RecordNotFound.
func (a *Server) repoGetRecord(w http.ResponseWriter, r *http.Request) {
	did, path, err := recordParams(r, "repo", "cid")
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	want := r.URL.Query().Get("cid")
	var out repoGetRecordOutput
	err = a.readRepo(did, func(bs atproto.Blocks, h atproto.Head) error {
		rec, cid, err := atproto.GetRecord(bs, h, path)
		if err != nil {
			return err
		}
		if rec == nil {
			return xerr(http.StatusBadRequest, XRPCRecordNotFound, "no record at %s", path)
		}
		if out.CID, err = atproto.CIDString(cid); err != nil {
			return err
		}
		if want != "" && want != out.CID {
			return xerr(http.StatusBadRequest, XRPCRecordNotFound, "the record at %s is %s, not %s (only the current version is kept)", path, out.CID, want)
		}
		out.URI = "at://" + h.DID + "/" + path
		out.Value, err = atproto.RecordJSON(rec)
		return err
	})
	answerXRPC(w, err, out)
}

// getLatestCommit answers com.atproto.sync.getLatestCommit: the head commit's CID and
// rev.
func (a *Server) getLatestCommit(w http.ResponseWriter, r *http.Request) {
	q, err := didQuery(r)
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	var out struct {
		CID string `json:"cid"`
		Rev string `json:"rev"`
	}
	err = a.readRepo(q.Get("did"), func(_ atproto.Blocks, h atproto.Head) error {
		out.Rev = h.Rev
		var err error
		out.CID, err = atproto.CIDString(h.Commit)
		return err
	})
	answerXRPC(w, err, out)
}

// didQuery reads the query of a method whose did parameter is required (a DID),
// among the others allowed.
func didQuery(r *http.Request, others ...string) (url.Values, error) {
	q, err := query(r, append([]string{"did"}, others...)...)
	switch {
	case err != nil:
		return nil, err
	case q.Get("did") == "":
		return nil, xerr(http.StatusBadRequest, XRPCInvalidRequest, "did is required")
	}
	return q, checkRepoParam("did", q.Get("did"))
}

// answerXRPC writes out as the JSON answer, or err as an XRPC error.
func answerXRPC(w http.ResponseWriter, err error, out any) {
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// getRepo answers com.atproto.sync.getRepo: the whole repository at the head as a CAR
// (what `baton export --car` writes). With since (a rev), the CAR rooted at the head
// holds only the blocks of the repository at the head that the repository at since
// did not have (atproto.RepoBlocksSince): what the reference PDS answers, the blocks
// written after that rev and still in the repository.
func (a *Server) getRepo(w http.ResponseWriter, r *http.Request) {
	q, err := didQuery(r, "since")
	if err == nil && q.Has("since") {
		if _, terr := syntax.ParseTID(q.Get("since")); terr != nil {
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "since: %v (a rev)", terr)
		}
	}
	var base *atproto.Head
	if err == nil && q.Has("since") {
		base, err = a.commitAtRev(q.Get("since"))
	}
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	var car bytes.Buffer
	err = a.readRepo(q.Get("did"), func(bs atproto.Blocks, h atproto.Head) error {
		var bl []atproto.Block
		var err error
		if q.Has("since") {
			bl, err = atproto.RepoBlocksSince(bs, h, base)
		} else {
			bl, err = atproto.RepoBlocks(bs, h)
		}
		if err != nil {
			return err
		}
		return atproto.WriteCAR(&car, h.Commit, bl)
	})
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	writeCAR(w, car.Bytes())
}

// commitAtRev returns the repository head after the last applied commit whose rev is
// at most rev (nil: none is), by a binary search over the applied chain (revs
// strictly increase with seq). It reads the chain outside any read of the format
// state: a later commit only raises the head, never this answer.
func (a *Server) commitAtRev(rev string) (*atproto.Head, error) {
	log := a.n.Log()
	at := func(seq uint64) (atproto.Envelope, error) {
		raw, err := log.Commit(seq)
		if err != nil {
			return atproto.Envelope{}, fmt.Errorf("commit %d: %w", seq, err)
		}
		return atproto.DecodeEnvelope(raw)
	}
	lo, hi := uint64(0), log.View().Head.Seq // commit lo has rev <= rev (0: none), hi+1 > rev
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		e, err := at(mid)
		if err != nil {
			return nil, err
		}
		if e.Repo.Rev <= rev {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return nil, nil
	}
	e, err := at(lo)
	if err != nil {
		return nil, err
	}
	return &atproto.Head{DID: e.Repo.DID, Data: e.Repo.Data, Rev: e.Repo.Rev, Commit: atproto.CIDOf(e.Block)}, nil
}

// listRecords limits (the lexicon's).
const (
	DefaultListRecords = 50
	MaxListRecords     = 100
)

// repoListRecordsOutput is com.atproto.repo.listRecords's answer.
type repoListRecordsOutput struct {
	Cursor  string                `json:"cursor,omitempty"`
	Records []repoGetRecordOutput `json:"records"`
}

// listRecords answers com.atproto.repo.listRecords: up to limit (1-100, default 50)
// records of a collection as getRecord gives each, in rkey order as the reference PDS
// lists them: descending (the newest TIDs first), ascending with reverse=true. cursor
// is the last rkey of the page before (exclusive); the answer has one when more
// records follow. It reads the MST nodes on the way to the page only
// (atproto.ListRecords).
func (a *Server) listRecords(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "repo", "collection", "limit", "cursor", "reverse")
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	did, coll := q.Get("repo"), q.Get("collection")
	limit, asc := DefaultListRecords, false
	switch {
	case did == "" || coll == "":
		err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "repo and collection are required")
	case q.Has("limit"):
		if limit, err = strconv.Atoi(q.Get("limit")); err != nil || limit < 1 || limit > MaxListRecords {
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "limit %q: an integer from 1 to %d", q.Get("limit"), MaxListRecords)
		}
	}
	if err == nil && q.Has("reverse") {
		if asc, err = strconv.ParseBool(q.Get("reverse")); err != nil || (q.Get("reverse") != "true" && q.Get("reverse") != "false") {
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "reverse %q: true or false", q.Get("reverse"))
		}
	}
	if err == nil {
		err = checkRepoParam("repo", did)
	}
	if err == nil {
		if _, perr := syntax.ParseNSID(coll); perr != nil {
			err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "collection: %v", perr)
		}
	}
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	out := repoListRecordsOutput{Records: []repoGetRecordOutput{}}
	err = a.readRepo(did, func(bs atproto.Blocks, h atproto.Head) error {
		recs, more, err := atproto.ListRecords(bs, h, coll, q.Get("cursor"), limit, asc)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			o := repoGetRecordOutput{URI: "at://" + h.DID + "/" + rec.Path}
			if o.CID, err = atproto.CIDString(rec.CID); err != nil {
				return err
			}
			if o.Value, err = atproto.RecordJSON(rec.Rec); err != nil {
				return fmt.Errorf("record %s: %w", rec.Path, err)
			}
			out.Records = append(out.Records, o)
		}
		if more {
			_, out.Cursor, _ = strings.Cut(recs[len(recs)-1].Path, "/")
		}
		return nil
	})
	answerXRPC(w, err, out)
}

// InvalidHandle is the handle atproto answers for an account whose handle is not
// verified: baton knows none (it resolves neither handles nor DIDs).
const InvalidHandle = "handle.invalid"

// repoDescribeRepoOutput is com.atproto.repo.describeRepo's answer. didDoc is left
// out: baton neither stores nor resolves the DID document.
type repoDescribeRepoOutput struct {
	Handle          string   `json:"handle"`
	DID             string   `json:"did"`
	Collections     []string `json:"collections"`
	HandleIsCorrect bool     `json:"handleIsCorrect"`
}

// describeRepo answers com.atproto.repo.describeRepo: the repository's DID and its
// collections (sorted; one MST seek each, atproto.Collections), handle
// "handle.invalid" with handleIsCorrect false, no didDoc.
func (a *Server) describeRepo(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "repo")
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	did := q.Get("repo")
	if did == "" {
		err = xerr(http.StatusBadRequest, XRPCInvalidRequest, "repo is required")
	} else {
		err = checkRepoParam("repo", did)
	}
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	out := repoDescribeRepoOutput{Handle: InvalidHandle}
	err = a.readRepo(did, func(bs atproto.Blocks, h atproto.Head) error {
		cs, err := atproto.Collections(bs, h)
		out.DID, out.Collections = h.DID, append([]string{}, cs...) // [] rather than null
		return err
	})
	answerXRPC(w, err, out)
}

// checkRepoParam checks a repo (or did) parameter: a DID, handles are not resolved.
func checkRepoParam(name, did string) error {
	if _, err := syntax.ParseDID(did); err != nil {
		return xerr(http.StatusBadRequest, XRPCInvalidRequest, "%s: %v (a DID: handles are not resolved here)", name, err)
	}
	return nil
}
