package main

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/device"
)

const testPLC = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"

// TestInitAtprotoImportKey: `init --new-chain --format atproto --import-key` takes an
// existing account's K-256 signing key as a PDS keeps it (hex with --key-type, the
// reference PDS's env line naming K256, its 32-byte key file, from stdin) and --did
// its did:plc: chain.key is that key (its did:key is the chain) and device.json names
// the repository; a hex key without its curve, a malformed did:plc, --did without
// --format atproto and --key-type k256 alone (a new K-256 key) behave as documented,
// and a refusal writes nothing.
func TestInitAtprotoImportKey(t *testing.T) {
	k, err := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hx := hex.EncodeToString(k.Bytes())
	hexFile := write("hex", []byte(hx+"\n"))
	envFile := write("env", []byte("PDS_REPO_SIGNING_KEY_K256_PRIVATE_KEY_HEX="+hx+"\n"))
	rawFile := write("key", k.Bytes())
	check := func(dir, repo string) {
		t.Helper()
		got, err := chain.LoadAnyKey(filepath.Join(dir, device.ChainKeyFile))
		if err != nil || got.DID() != k.DID() {
			t.Fatalf("chain.key: %v", err)
		}
		d, err := device.Open(dir)
		if err != nil || d.Chain != k.DID() || d.Repo != repo || !d.Founder {
			t.Fatalf("device: %+v %v", d, err)
		}
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"hex", "", []string{"--import-key", hexFile, "--key-type", "k256", "--did", testPLC}},
		{"env line", "", []string{"--import-key", envFile, "--did", testPLC}},
		{"raw key file", "", []string{"--import-key", rawFile, "--key-type", "k256", "--did", testPLC}},
		{"stdin", hx, []string{"--import-key", "-", "--key-type", "k256", "--did", testPLC}},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		args := append([]string{"init", "--data", dir, "--new-chain", "--format", "atproto"}, tc.args...)
		code, out, errs := runCLI(t, nil, tc.stdin, args...)
		if code != 0 {
			t.Fatalf("%s: %d %s", tc.name, code, errs)
		}
		if !strings.Contains(out, k.DID()) || !strings.Contains(out, "repository:       "+testPLC) || !strings.Contains(out, "does not resolve") {
			t.Fatalf("%s: init printed %s", tc.name, out)
		}
		check(dir, testPLC)
	}
	// --did-doc: a DID document naming the key passes; one naming another refuses
	// before anything is written.
	docFor := func(key string) string {
		return write("doc-"+key[len(key)-6:], []byte(`{"id":"`+testPLC+`","verificationMethod":[{"id":"`+testPLC+`#atproto","type":"Multikey","controller":"`+testPLC+`","publicKeyMultibase":"`+strings.TrimPrefix(key, "did:key:")+`"}]}`))
	}
	dir := filepath.Join(t.TempDir(), "d")
	code, out, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain", "--format", "atproto", "--import-key", envFile, "--did", testPLC, "--did-doc", docFor(k.DID()))
	if code != 0 || !strings.Contains(out, "checked offline") {
		t.Fatalf("--did-doc naming the key: %d %s %s", code, out, errs)
	}
	check(dir, testPLC)
	other, _ := atproto.GenerateKeyOf(atproto.KeyTypeP256)
	dir = filepath.Join(t.TempDir(), "d")
	code, _, errs = runCLI(t, nil, "", "init", "--data", dir, "--new-chain", "--format", "atproto", "--import-key", envFile, "--did", testPLC, "--did-doc", docFor(other.DID()))
	if code != 1 || !strings.Contains(errs, "its #atproto key is "+other.DID()) {
		t.Fatalf("--did-doc naming another key: %d %s", code, errs)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("--did-doc refused, but %s was written", dir)
	}
	// Without --did the repository is the key's did:key.
	dir = filepath.Join(t.TempDir(), "d")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain", "--format", "atproto", "--import-key", envFile); code != 0 {
		t.Fatal(errs)
	}
	check(dir, "")
	// A new K-256 key.
	dir = filepath.Join(t.TempDir(), "d")
	code, out, errs = runCLI(t, nil, "", "init", "--data", dir, "--new-chain", "--format", "atproto", "--key-type", "k256")
	if code != 0 || !strings.Contains(out, "did:key:zQ3s") {
		t.Fatalf("--key-type k256: %d %s %s", code, out, errs)
	}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"hex without its curve", "does not say its curve", []string{"--format", "atproto", "--import-key", hexFile}},
		{"malformed did:plc", "not a did:plc", []string{"--format", "atproto", "--import-key", envFile, "--did", "did:plc:ewvi7nxzyoun6zhxrhs64oi0"}},
		{"did without atproto", "go with --new-chain --format atproto", []string{"--did", testPLC}},
		{"curve against the env line", "names a k256 key", []string{"--format", "atproto", "--import-key", envFile, "--key-type", "p256"}},
		{"unknown key type", "want p256 or k256", []string{"--format", "atproto", "--key-type", "ed25519"}},
		{"did-doc without did", "--did-doc goes with --did", []string{"--format", "atproto", "--did-doc", envFile}},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		args := append([]string{"init", "--data", dir, "--new-chain"}, tc.args...)
		code, out, errs := runCLI(t, nil, "", args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: %d %q %q, want usage error %q", tc.name, code, out, errs, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: wrote %s", tc.name, dir)
		}
	}
}

// TestSubmitCARUsage: --car goes alone; a file that is not a repository CAR is refused
// before anything is submitted (no node runs here).
func TestSubmitCARUsage(t *testing.T) {
	dir := t.TempDir()
	notCAR := filepath.Join(dir, "x.car")
	if err := os.WriteFile(notCAR, []byte("not a car"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, nil, "", "submit", "--data", dir, "--car", notCAR, "--path", "a/b"); code != 2 || !strings.Contains(errs, "--car goes without") {
		t.Fatalf("--car with --path: %d %s", code, errs)
	}
	if code, _, errs := runCLI(t, nil, "", "submit", "--data", dir, "--car", notCAR); code != 1 || !strings.Contains(errs, "read the repository CAR") {
		t.Fatalf("--car of a file that is not a CAR: %d %s", code, errs)
	}
}
