package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atclient"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
	car "github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// TestXRPCSyncIndigoClient: describeServer, listRepos, getRepoStatus, getBlocks and
// getRepo?since= on a real atproto node's public listener, called through indigo's
// own XRPC client (atclient and the generated comatproto functions), which also reads
// the errors' names. describeServer answers what a relay's host check asks. listRepos
// lists nothing before the first commit, then the one repository at its head
// (getLatestCommit's CID and rev), active; getRepoStatus says the same. getBlocks
// gives back, for every block of the repository's CAR (getRepo, read by indigo), the
// same bytes under a CID they hash to, in a root-less CAR that go-car reads, plus a
// block of an older head; a CID it does not hold is BlockNotFound, another DID
// RepoNotFound, bad parameters InvalidRequest.
func TestXRPCSyncIndigoClient(t *testing.T) {
	n, key := startAtprotoHolder(t, Config{XRPCAddr: "127.0.0.1:0"})
	did := key.DID()
	c := atclient.NewAPIClient("http://" + n.srv.XRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	xname := func(err error) string {
		var ae *atclient.APIError
		if errors.As(err, &ae) {
			return ae.Name
		}
		return fmt.Sprintf("not an XRPC error: %v", err)
	}

	// What indigo's relay asks a host before it crawls it (HostClient.CheckHost is
	// this call): the server's did:web, and no account can be made.
	ds, err := comatproto.ServerDescribeServer(ctx, c)
	if err != nil || ds.Did != "did:web:"+strings.ReplaceAll(n.srv.XRPCAddr(), ":", "%3A") || ds.AvailableUserDomains == nil ||
		len(ds.AvailableUserDomains) != 0 || ds.InviteCodeRequired == nil || !*ds.InviteCodeRequired {
		t.Fatalf("describeServer: %+v, %v", ds, err)
	}

	lr, err := comatproto.SyncListRepos(ctx, c, "", 0)
	if err != nil || len(lr.Repos) != 0 || lr.Cursor != nil {
		t.Fatalf("listRepos before the first commit: %+v, %v", lr, err)
	}
	if _, err := comatproto.SyncGetRepoStatus(ctx, c, did); xname(err) != XRPCRepoNotFound {
		t.Fatalf("getRepoStatus before the first commit: %v", err)
	}

	for i := range 10 {
		atSubmit(t, n, intentlog.Intent{ID: fmt.Sprintf("p%d", i), Op: intentlog.OpPut,
			Path: fmt.Sprintf("app.bsky.feed.post/3kpost%07d", i), Value: atRecord(t, fmt.Sprintf("post %d", i))})
	}
	first, err := comatproto.SyncGetLatestCommit(ctx, c, did)
	if err != nil {
		t.Fatal(err)
	}
	old, err := comatproto.SyncGetRepo(ctx, c, did, "")
	if err != nil {
		t.Fatal(err)
	}
	atSubmit(t, n, intentlog.Intent{ID: "d", Op: intentlog.OpDel, Path: "app.bsky.feed.post/3kpost0000003"})
	atSubmit(t, n, intentlog.Intent{ID: "e", Op: intentlog.OpPut, Path: "app.bsky.feed.post/3kpost0000004", Value: atRecord(t, "post 4, edited")})
	atSubmit(t, n, intentlog.Intent{ID: "n", Op: intentlog.OpPut, Path: "app.bsky.feed.like/3klike0000001", Value: atRecord(t, "a like")})
	latest, err := comatproto.SyncGetLatestCommit(ctx, c, did)
	if err != nil {
		t.Fatal(err)
	}

	lr, err = comatproto.SyncListRepos(ctx, c, "", 0)
	if err != nil || len(lr.Repos) != 1 || lr.Cursor != nil {
		t.Fatalf("listRepos: %+v, %v", lr, err)
	}
	if r := lr.Repos[0]; r.Did != did || r.Head != latest.Cid || r.Rev != latest.Rev || r.Active == nil || !*r.Active || r.Status != nil {
		t.Fatalf("listRepos' repository %+v, want %s at %s (%s), active", r, did, latest.Cid, latest.Rev)
	}
	if lr, err := comatproto.SyncListRepos(ctx, c, did, 10); err != nil || len(lr.Repos) != 0 {
		t.Fatalf("listRepos after the cursor %s: %+v, %v", did, lr, err)
	}
	rs, err := comatproto.SyncGetRepoStatus(ctx, c, did)
	if err != nil || rs.Did != did || !rs.Active || rs.Rev == nil || *rs.Rev != latest.Rev || rs.Status != nil {
		t.Fatalf("getRepoStatus: %+v, %v", rs, err)
	}

	// Every block of the repository, through getBlocks, equals getRepo's.
	full, err := comatproto.SyncGetRepo(ctx, c, did, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(full)); err != nil {
		t.Fatalf("indigo LoadRepoFromCAR (getRepo): %v", err)
	}
	want := readCARBlocks(t, full, true)
	var cids []string
	for k := range want {
		cids = append(cids, k)
	}
	slices.Sort(cids)
	cids = append(cids, first.Cid) // an older head's commit block
	body, err := comatproto.SyncGetBlocks(ctx, c, cids, did)
	if err != nil {
		t.Fatalf("getBlocks of %d blocks: %v", len(cids), err)
	}
	got := readCARBlocks(t, body, false)
	if len(got) != len(cids) {
		t.Fatalf("getBlocks answered %d blocks, asked for %d", len(got), len(cids))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("getBlocks' block %s differs from getRepo's", k)
		}
	}
	if _, ok := got[first.Cid]; !ok {
		t.Fatalf("getBlocks left out the older commit %s", first.Cid)
	}

	// getRepo?since=: the repository at that rev plus the diff is the repository at
	// the head, which indigo loads (every MST node and record there, the commit
	// signed); the diff holds only blocks the old repository lacked.
	diff, err := comatproto.SyncGetRepo(ctx, c, did, first.Rev)
	if err != nil {
		t.Fatalf("getRepo since %s: %v", first.Rev, err)
	}
	was, dl := readCARBlocks(t, old, true), readCARBlocks(t, diff, true)
	if len(dl) == 0 || len(dl) >= len(want) {
		t.Fatalf("the diff since %s has %d blocks, the repository %d", first.Rev, len(dl), len(want))
	}
	for k, v := range dl {
		if _, ok := was[k]; ok || !bytes.Equal(want[k], v) {
			t.Fatalf("diff block %s: in the old repository %v, or not the head repository's", k, ok)
		}
	}
	var merged []atproto.Block
	for _, m := range []map[string][]byte{was, dl} {
		for k, v := range m {
			merged = append(merged, atproto.Block{CID: cid.MustParse(k).Bytes(), Data: v})
		}
	}
	var mcar bytes.Buffer
	if err := atproto.WriteCAR(&mcar, cid.MustParse(latest.Cid).Bytes(), merged); err != nil {
		t.Fatal(err)
	}
	mc, mr, err := repo.LoadRepoFromCAR(ctx, &mcar)
	if err != nil || mc.Rev != latest.Rev {
		t.Fatalf("indigo loads the old repository + the diff: %v (rev %v)", err, mc)
	}
	records := 0
	if err := mr.MST.Walk(func(k []byte, v cid.Cid) error {
		nsid, rkey, err := syntax.ParseRepoPath(string(k))
		if err == nil {
			_, _, err = mr.GetRecordBytes(ctx, nsid, rkey)
		}
		records++
		return err
	}); err != nil || records != 10 {
		t.Fatalf("walking the merged repository: %v (%d records, want 10)", err, records)
	}
	if _, _, err := mr.GetRecordBytes(ctx, "app.bsky.feed.like", "3klike0000001"); err != nil {
		t.Fatalf("the merged repository lacks the new record: %v", err)
	}
	if _, _, err := mr.GetRecordBytes(ctx, "app.bsky.feed.post", "3kpost0000003"); err == nil {
		t.Fatal("the merged repository still has the deleted record")
	}
	for since, n := range map[string]int{latest.Rev: 0, "2222222222222": len(want)} {
		b, err := comatproto.SyncGetRepo(ctx, c, did, since)
		if err != nil {
			t.Fatal(err)
		}
		if got := readCARBlocks(t, b, true); len(got) != n {
			t.Fatalf("getRepo since %s: %d blocks, want %d", since, len(got), n)
		}
	}

	absent := cid.NewCidV1(cid.DagCBOR, cid.Cid(mustCID(t, atproto.CIDOf([]byte("not a block")))).Hash()).String()
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"a block not held", func() error { _, err := comatproto.SyncGetBlocks(ctx, c, []string{cids[0], absent}, did); return err }, XRPCBlockNotFound},
		{"another DID", func() error {
			_, err := comatproto.SyncGetBlocks(ctx, c, cids[:1], "did:plc:ewvi7nxzyoun6zhxrhs64oiz")
			return err
		}, XRPCRepoNotFound},
		{"no cids", func() error { _, err := comatproto.SyncGetBlocks(ctx, c, nil, did); return err }, XRPCInvalidRequest},
		{"a bad cid", func() error { _, err := comatproto.SyncGetBlocks(ctx, c, []string{"bafynot"}, did); return err }, XRPCInvalidRequest},
		{"a cid twice", func() error { _, err := comatproto.SyncGetBlocks(ctx, c, []string{cids[0], cids[0]}, did); return err }, XRPCInvalidRequest},
		{"too many cids", func() error {
			_, err := comatproto.SyncGetBlocks(ctx, c, slices.Repeat([]string{absent}, MaxGetBlocks+1), did)
			return err
		}, XRPCInvalidRequest},
		{"status of another DID", func() error {
			_, err := comatproto.SyncGetRepoStatus(ctx, c, "did:plc:ewvi7nxzyoun6zhxrhs64oiz")
			return err
		}, XRPCRepoNotFound},
		{"since not a rev", func() error { _, err := comatproto.SyncGetRepo(ctx, c, did, "yesterday"); return err }, XRPCInvalidRequest},
		{"status of no DID", func() error { _, err := comatproto.SyncGetRepoStatus(ctx, c, "not-a-did"); return err }, XRPCInvalidRequest},
		{"listRepos limit 0", func() error { _, err := comatproto.SyncListRepos(ctx, c, "", -1); return err }, XRPCInvalidRequest},
		{"listRepos limit 1001", func() error { _, err := comatproto.SyncListRepos(ctx, c, "", MaxListRepos+1); return err }, XRPCInvalidRequest},
	} {
		if err := tc.call(); xname(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

func mustCID(t *testing.T, b []byte) cid.Cid {
	t.Helper()
	c, err := cid.Cast(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readCARBlocks reads a CAR with go-car (its header reader and section reader: its
// CarReader refuses a CAR with no root, which is what getBlocks answers), checks that
// it has one root or none as rooted says and that each block hashes to its CID, and
// returns the blocks by CID string.
func readCARBlocks(t *testing.T, b []byte, rooted bool) map[string][]byte {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(b))
	h, err := car.ReadHeader(br)
	if err != nil || h.Version != 1 || (len(h.Roots) == 1) != rooted || len(h.Roots) > 1 {
		t.Fatalf("CAR header %+v (rooted %v): %v", h, rooted, err)
	}
	out := map[string][]byte{}
	for {
		c, data, err := carutil.ReadNode(br)
		if err != nil {
			if strings.Contains(err.Error(), "EOF") {
				return out
			}
			t.Fatalf("CAR section: %v", err)
		}
		sum, err := c.Prefix().Sum(data)
		if err != nil || !sum.Equals(c) {
			t.Fatalf("block %s does not hash to its CID (%v)", c, err)
		}
		out[c.String()] = data
	}
}
