package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/api/bsky"
	"github.com/bluesky-social/indigo/atproto/atdata"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// TestXRPCListDescribe: com.atproto.repo.listRecords and describeRepo on a real
// atproto node, on the socket and on the public listener (the same bytes, no token
// on the latter), decoded into indigo's client types (RepoListRecords_Output with
// each value read as an app.bsky.feed.post, RepoDescribeRepo_Output). Paging with
// the cursor gives every record of a collection exactly once, newest rkey first by
// default and oldest first with reverse=true; each value reads back (atdata) to the
// record's bytes and each cid is the record's; describeRepo lists the collections
// sorted. Bad parameters answer InvalidRequest, another DID RepoNotFound.
func TestXRPCListDescribe(t *testing.T) {
	n, key := startAtprotoHolder(t, Config{XRPCAddr: "127.0.0.1:0"})
	did := key.DID()

	// Before any commit: no repository yet.
	if st, ej, body := xrpcGet(t, n.APISocket(), "/xrpc/com.atproto.repo.describeRepo?repo="+did); st != 400 || ej.Error != XRPCRepoNotFound {
		t.Fatalf("describeRepo before the first commit: %d %s", st, body)
	}

	model := map[string][]byte{}
	colls := []string{"app.bsky.feed.post", "app.bsky.feed.like", "com.example.thing"}
	for i := range 24 {
		coll := colls[i%len(colls)]
		if i%5 == 4 {
			coll = colls[0]
		}
		p := fmt.Sprintf("%s/3kpost%07d", coll, (i*7919)%1000) // rkeys out of submission order
		v := atRecord(t, fmt.Sprintf("post %d", i))
		atSubmit(t, n, intentlog.Intent{ID: fmt.Sprintf("r%d", i), Op: intentlog.OpPut, Path: p, Value: v})
		model[p] = v
	}
	gone := firstOf(model, colls[1])
	atSubmit(t, n, intentlog.Intent{ID: "del", Op: intentlog.OpDel, Path: gone})
	delete(model, gone)

	// get answers path from the socket, and checks the public listener answers the same.
	get := func(path string) (int, errorJSON, []byte) {
		t.Helper()
		st, ej, body := xrpcGet(t, n.APISocket(), path)
		pst, pbody := publicDo(t, http.MethodGet, "http://"+n.srv.XRPCAddr()+path, nil)
		if pst != st || !bytes.Equal([]byte(pbody), body) {
			t.Fatalf("%s: the socket answers %d %.200s, the public listener %d %.200s", path, st, body, pst, pbody)
		}
		return st, ej, body
	}

	for _, coll := range colls {
		var want []string
		for p := range model {
			if strings.HasPrefix(p, coll+"/") {
				want = append(want, p)
			}
		}
		slices.Sort(want)
		for _, reverse := range []bool{false, true} {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatalf("%s: more than 10 pages", coll)
				}
				q := fmt.Sprintf("/xrpc/com.atproto.repo.listRecords?repo=%s&collection=%s&limit=3", did, coll)
				if reverse {
					q += "&reverse=true"
				}
				if cursor != "" {
					q += "&cursor=" + cursor
				}
				st, ej, body := get(q)
				if st != http.StatusOK {
					t.Fatalf("%s: %d %+v", q, st, ej)
				}
				var out comatproto.RepoListRecords_Output
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatalf("%s: indigo's RepoListRecords_Output: %v\n%s", q, err, body)
				}
				var raw struct {
					Records []struct{ Value json.RawMessage }
				}
				if err := json.Unmarshal(body, &raw); err != nil {
					t.Fatal(err)
				}
				for i, rec := range out.Records {
					p := strings.TrimPrefix(rec.Uri, "at://"+did+"/")
					v, ok := model[p]
					if !ok || rec.Uri != "at://"+did+"/"+p {
						t.Fatalf("%s: record %s", q, rec.Uri)
					}
					cs, _ := atproto.CIDString(atproto.CIDOf(v))
					post, isPost := rec.Value.Val.(*bsky.FeedPost)
					if rec.Cid != cs || !isPost || !strings.HasPrefix(post.Text, "post ") {
						t.Fatalf("%s: %s: cid %s (want %s), value %#v", q, p, rec.Cid, cs, rec.Value.Val)
					}
					obj, err := atdata.UnmarshalJSON(raw.Records[i].Value)
					if err != nil {
						t.Fatal(err)
					}
					if back, err := atdata.MarshalCBOR(obj); err != nil || !bytes.Equal(back, v) {
						t.Fatalf("%s: %s: the value does not read back to the record (%v)", q, p, err)
					}
					got = append(got, p)
				}
				if out.Cursor == nil {
					break
				}
				if len(out.Records) != 3 {
					t.Fatalf("%s: a cursor after a page of %d", q, len(out.Records))
				}
				cursor = *out.Cursor
			}
			if !reverse {
				slices.Reverse(got) // newest rkey first: the reverse of key order
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s reverse=%v: listed %v, want %v", coll, reverse, got, want)
			}
		}
	}
	// The default limit (50) takes a whole collection; a collection without records is empty.
	st, _, body := get("/xrpc/com.atproto.repo.listRecords?repo=" + did + "&collection=app.bsky.feed.post")
	var all comatproto.RepoListRecords_Output
	if st != 200 || json.Unmarshal(body, &all) != nil || all.Cursor != nil || len(all.Records) == 0 {
		t.Fatalf("default limit: %d %s", st, body)
	}
	if st, _, body := get("/xrpc/com.atproto.repo.listRecords?repo=" + did + "&collection=app.bsky.graph.follow"); st != 200 || string(bytes.TrimSpace(body)) != `{"records":[]}` {
		t.Fatalf("an empty collection: %d %s", st, body)
	}

	st, ej, body := get("/xrpc/com.atproto.repo.describeRepo?repo=" + did)
	var desc comatproto.RepoDescribeRepo_Output
	if st != 200 || json.Unmarshal(body, &desc) != nil {
		t.Fatalf("describeRepo: %d %+v %s", st, ej, body)
	}
	wantColls := slices.Clone(colls)
	slices.Sort(wantColls)
	if desc.Did != did || desc.Handle != InvalidHandle || desc.HandleIsCorrect || !slices.Equal(desc.Collections, wantColls) || desc.DidDoc != nil {
		t.Fatalf("describeRepo: %s", body)
	}

	for _, tc := range []struct {
		q    string
		name string
	}{
		{"listRecords?repo=" + did, XRPCInvalidRequest},
		{"listRecords?collection=app.bsky.feed.post", XRPCInvalidRequest},
		{"listRecords?repo=" + did + "&collection=app.bsky.feed.post&limit=0", XRPCInvalidRequest},
		{"listRecords?repo=" + did + "&collection=app.bsky.feed.post&limit=101", XRPCInvalidRequest},
		{"listRecords?repo=" + did + "&collection=app.bsky.feed.post&limit=x", XRPCInvalidRequest},
		{"listRecords?repo=" + did + "&collection=app.bsky.feed.post&reverse=1", XRPCInvalidRequest},
		{"listRecords?repo=" + did + "&collection=not..nsid", XRPCInvalidRequest},
		{"listRecords?repo=alice.example.com&collection=app.bsky.feed.post", XRPCInvalidRequest},
		{"listRecords?repo=" + did + "&collection=app.bsky.feed.post&rkeyStart=a", XRPCInvalidRequest},
		{"listRecords?repo=did:plc:ewvi7nxzyoun6zhxrhs64oiz&collection=app.bsky.feed.post", XRPCRepoNotFound},
		{"describeRepo", XRPCInvalidRequest},
		{"describeRepo?repo=alice.example.com", XRPCInvalidRequest},
		{"describeRepo?repo=did:plc:ewvi7nxzyoun6zhxrhs64oiz", XRPCRepoNotFound},
	} {
		if st, ej, body := get("/xrpc/com.atproto.repo." + tc.q); st != 400 || ej.Error != tc.name || ej.Message == "" {
			t.Errorf("%s: %d %s, want 400 %s", tc.q, st, body, tc.name)
		}
	}
}

// firstOf returns the first path of coll in model (sorted).
func firstOf(model map[string][]byte, coll string) string {
	var ps []string
	for p := range model {
		if strings.HasPrefix(p, coll+"/") {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps[0]
}
