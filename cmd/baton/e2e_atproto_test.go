package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/batonhq/baton/signer/chain"
)

// TestE2EAtprotoCAR: `baton init --new-chain --format atproto` makes a P-256 chain key,
// `baton run` founds an atproto chain, `baton submit` writes DAG-CBOR records (a put,
// a second put, a delete; a JSON value is refused), and `baton export --car` writes a
// CAR that indigo's LoadRepoFromCAR reads, whose commit verifies under the chain key
// and whose records are the ones submitted; the running node's getRepo serves the
// same bytes.
func TestE2EAtprotoCAR(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs the binary")
	}
	data := filepath.Join(t.TempDir(), "a1")
	out := mustBin(t, "init", "--data", data, "--new-chain", "--format", "atproto")
	did := ""
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "did:key:zDn") {
			did = f
		}
	}
	if did == "" {
		t.Fatalf("init printed no P-256 chain: %s", out)
	}
	l := freeListen(t)
	start(t, "a1", data, l, append([]string{"run", "--data", data, "--listen", l}, e2eFlags...)...)
	eventually(t, 20*time.Second, "a1 to hold the lease", func() (bool, string) {
		st, err := state(data)
		if err != nil {
			return false, err.Error()
		}
		return st.Lease.HeldByMe, ""
	})
	// {"text": "hi", "$type": "app.bsky.feed.post"} in DAG-CBOR.
	rec := []byte("\xa2\x64text\x62hi\x65$type\x72app.bsky.feed.post")
	recFile := filepath.Join(t.TempDir(), "rec.cbor")
	if err := os.WriteFile(recFile, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	const p1, p2 = "app.bsky.feed.post/3l3qo2vut0001", "app.bsky.feed.post/3l3qo2vut0002"
	mustBin(t, "submit", "--data", data, "--path", p1, "--file", recFile, "--wait", "signed")
	mustBin(t, "submit", "--data", data, "--path", p2, "--file", recFile, "--wait", "signed")
	mustBin(t, "submit", "--data", data, "--path", p1, "--del", "--wait", "signed")
	if code, _, errs := bin(t, "", "submit", "--data", data, "--path", "app.bsky.feed.post/x", "--value", `{"text":"hi"}`); code == 0 || !strings.Contains(errs, "bad request") || !strings.Contains(errs, "DAG-CBOR") {
		// Refused at the entrance with the format's own rule (intentlog.ValidateIntentIn),
		// before it reaches the log.
		t.Fatalf("a JSON value on an atproto chain: exit %d, %s", code, errs)
	}
	// With --json-record the same JSON goes in as the DAG-CBOR record rec.
	const p3 = "app.bsky.feed.post/3l3qo2vut0003"
	mustBin(t, "submit", "--data", data, "--path", p3, "--json-record", "--value", `{"$type": "app.bsky.feed.post", "text": "hi"}`, "--wait", "signed")
	if code, _, errs := bin(t, "", "submit", "--data", data, "--path", p3, "--json-record", "--value", `{"n": 1.5}`); code != 2 || !strings.Contains(errs, "--json-record") {
		t.Fatalf("a float in --json-record: exit %d, %s", code, errs)
	}
	if out := mustBin(t, "status", "--data", data); !regexp.MustCompile(`(?m)^repository +` + regexp.QuoteMeta(did) + ` at rev [2-7a-z]{13}$`).MatchString(out) {
		t.Fatalf("status shows no repository line:\n%s", out)
	}
	// The NDJSON export verifies (on an atproto chain, by replaying the repository).
	nd := mustBin(t, "export", "--data", data)
	if out := mustBin2(t, nd, "verify", "--chain", did, "-"); !strings.Contains(out, "ok: 4 commits") {
		t.Fatalf("verify: %s", out)
	}
	car := mustBin(t, "export", "--data", data, "--car")
	ctx := context.Background()
	ic, ir, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader([]byte(car)))
	if err != nil {
		t.Fatalf("indigo LoadRepoFromCAR: %v", err)
	}
	pub, err := atcrypto.ParsePublicDIDKey(did)
	if err != nil {
		t.Fatal(err)
	}
	if err := ic.VerifySignature(pub); err != nil {
		t.Fatalf("indigo VerifySignature: %v", err)
	}
	nsid, rkey, _ := syntax.ParseRepoPath(p2)
	if b, _, err := ir.GetRecordBytes(ctx, nsid, rkey); err != nil || !bytes.Equal(b, rec) {
		t.Fatalf("record %s: %x %v", p2, b, err)
	}
	nsid, rkey, _ = syntax.ParseRepoPath(p3)
	if b, _, err := ir.GetRecordBytes(ctx, nsid, rkey); err != nil || !bytes.Equal(b, rec) {
		t.Fatalf("record %s (--json-record): %x %v, want %x", p3, b, err, rec)
	}
	nsid, rkey, _ = syntax.ParseRepoPath(p1)
	if _, _, err := ir.GetRecordBytes(ctx, nsid, rkey); err == nil {
		t.Fatalf("deleted record %s still in the repository", p1)
	}
	// The running node serves the same repository (com.atproto.sync.getRepo over its
	// socket): the replica's own blocks give the bytes the export rebuilt from the
	// commits.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(data, "baton.sock"))
		}}}
	resp, err := hc.Get("http://baton/xrpc/com.atproto.sync.getRepo?did=" + did)
	if err != nil {
		t.Fatal(err)
	}
	served, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/vnd.ipld.car" {
		t.Fatalf("getRepo: %d %s (%v)", resp.StatusCode, served, err)
	}
	if !bytes.Equal(served, []byte(car)) {
		t.Fatalf("getRepo serves %d bytes, export --car wrote %d: they differ", len(served), len(car))
	}
}

// mustBin2 is mustBin with stdin.
func mustBin2(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errs := bin(t, stdin, args...)
	if code != 0 {
		t.Fatalf("baton %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// TestE2EAtprotoImportedKey: an account moving its repository onto its devices.
// `init --import-key` takes its K-256 signing key as the reference PDS's env line
// holds it and `--did` its did:plc; `run` founds the chain (the genesis names the
// did:plc); `invite --with-chain-key` carries the K-256 key and its history marker to
// a second device (`join`), which signs once the lease is transferred to it. The CAR
// exported on the second device is read by indigo: the commit is the did:plc's,
// signed by the imported key, and holds the records both devices signed.
func TestE2EAtprotoImportedKey(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs the binary")
	}
	const plc = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
	root := t.TempDir()
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := priv.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	did := pub.DIDKey()
	keyFile := filepath.Join(root, "signing.env")
	if err := os.WriteFile(keyFile, []byte("PDS_REPO_SIGNING_KEY_K256_PRIVATE_KEY_HEX="+hex.EncodeToString(priv.Bytes())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a1, a2 := filepath.Join(root, "a1"), filepath.Join(root, "a2")
	out := mustBin(t, "init", "--data", a1, "--new-chain", "--format", "atproto", "--import-key", keyFile, "--did", plc)
	if !strings.Contains(out, did) || !strings.Contains(out, plc) {
		t.Fatalf("init: %s", out)
	}
	l1 := freeListen(t)
	start(t, "a1", a1, l1, append([]string{"run", "--data", a1, "--listen", l1}, e2eFlags...)...)
	eventually(t, 20*time.Second, "a1 to hold the lease", func() (bool, string) {
		st, err := state(a1)
		if err != nil {
			return false, err.Error()
		}
		return st.Lease.HeldByMe, ""
	})
	rec := []byte("\xa2\x64text\x62hi\x65$type\x72app.bsky.feed.post")
	recFile := filepath.Join(root, "rec.cbor")
	if err := os.WriteFile(recFile, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	const p1, p2 = "app.bsky.feed.post/3l3qo2vut0001", "app.bsky.feed.post/3l3qo2vut0002"
	mustBin(t, "submit", "--data", a1, "--path", p1, "--file", recFile, "--wait", "signed")
	eventually(t, 10*time.Second, "a1 to remember its genesis", func() (bool, string) {
		_, err := os.Stat(filepath.Join(a1, "chain.genesis"))
		return err == nil, fmt.Sprint(err)
	})
	invFile := filepath.Join(root, "invite")
	invite := mustBin(t, "invite", "--data", a1, "--with-chain-key", "--valid-for", "5m")
	if err := os.WriteFile(invFile, []byte(invite), 0o600); err != nil {
		t.Fatal(err)
	}
	l2 := freeListen(t)
	start(t, "a2", a2, l2, append([]string{"join", "--data", a2, "--listen", l2, "--invite-file", invFile}, e2eFlags...)...)
	var id2 string
	eventually(t, 30*time.Second, "a2 to join", func() (bool, string) {
		st, err := state(a2)
		if err != nil {
			return false, err.Error()
		}
		id2 = st.ID
		return st.Members == 2 && st.Head.Seq >= 1, fmt.Sprintf("members %d head %d", st.Members, st.Head.Seq)
	})
	hist1, _ := os.ReadFile(filepath.Join(a1, "chain.genesis"))
	hist2, _ := os.ReadFile(filepath.Join(a2, "chain.genesis"))
	if len(hist1) == 0 || !bytes.Equal(hist1, hist2) {
		t.Fatalf("the history marker did not travel with the key:\n%s\n%s", hist1, hist2)
	}
	if k, err := chain.LoadAnyKey(filepath.Join(a2, "chain.key")); err != nil || k.DID() != did {
		t.Fatalf("a2's chain key: %v", err)
	}
	mustBin(t, "lease", "transfer", "--data", a1, "--to", id2)
	eventually(t, 20*time.Second, "a2 to hold the lease", func() (bool, string) {
		st, err := state(a2)
		if err != nil {
			return false, err.Error()
		}
		return st.Lease.HeldByMe, st.Lease.Holder
	})
	mustBin(t, "submit", "--data", a2, "--path", p2, "--file", recFile, "--wait", "signed")
	nd := mustBin(t, "export", "--data", a2)
	if out := mustBin2(t, nd, "verify", "--chain", did, "-"); !strings.Contains(out, "ok: 2 commits") {
		t.Fatalf("verify: %s", out)
	}
	car := mustBin(t, "export", "--data", a2, "--car")
	ctx := context.Background()
	ic, ir, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader([]byte(car)))
	if err != nil {
		t.Fatalf("indigo LoadRepoFromCAR: %v", err)
	}
	if ic.DID != plc {
		t.Fatalf("the repository's DID is %s, want %s", ic.DID, plc)
	}
	if err := ic.VerifySignature(pub); err != nil {
		t.Fatalf("indigo VerifySignature under the imported key: %v", err)
	}
	for _, p := range []string{p1, p2} {
		nsid, rkey, _ := syntax.ParseRepoPath(p)
		if b, _, err := ir.GetRecordBytes(ctx, nsid, rkey); err != nil || !bytes.Equal(b, rec) {
			t.Fatalf("record %s: %x %v", p, b, err)
		}
	}
	// The account moves on again, to a new chain with a new key: `submit --car` puts the
	// CAR's records, giving the same MST (data CID); submitting it again adds nothing.
	carFile := filepath.Join(root, "repo.car")
	if err := os.WriteFile(carFile, []byte(car), 0o600); err != nil {
		t.Fatal(err)
	}
	b1 := filepath.Join(root, "b1")
	mustBin(t, "init", "--data", b1, "--new-chain", "--format", "atproto", "--did", plc)
	lb := freeListen(t)
	start(t, "b1", b1, lb, append([]string{"run", "--data", b1, "--listen", lb}, e2eFlags...)...)
	eventually(t, 20*time.Second, "b1 to hold the lease", func() (bool, string) {
		st, err := state(b1)
		if err != nil {
			return false, err.Error()
		}
		return st.Lease.HeldByMe, ""
	})
	if out := mustBin(t, "submit", "--data", b1, "--car", carFile, "--wait", "signed"); !strings.Contains(out, "put 2 records of "+plc) || !strings.Contains(out, "2 new, 0 already in") {
		t.Fatalf("submit --car: %s", out)
	}
	if out := mustBin(t, "submit", "--data", b1, "--car", carFile); !strings.Contains(out, "0 new, 2 already in") {
		t.Fatalf("submit --car again: %s", out)
	}
	bc, _, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader([]byte(mustBin(t, "export", "--data", b1, "--car"))))
	if err != nil {
		t.Fatal(err)
	}
	if bc.DID != plc || bc.Data != ic.Data {
		t.Fatalf("the moved repository: did %s data %s, want %s %s", bc.DID, bc.Data, plc, ic.Data)
	}
	// The replica serves the repository under its did:plc, not under the key's did:key.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(a2, "baton.sock"))
		}}}
	for q, want := range map[string]int{plc: http.StatusOK, did: http.StatusBadRequest} {
		resp, err := hc.Get("http://baton/xrpc/com.atproto.sync.getLatestCommit?did=" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("getLatestCommit?did=%s: %d %s, want %d", q, resp.StatusCode, body, want)
		}
	}
}
