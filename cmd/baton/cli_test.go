package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/transport"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// runCLI runs the CLI in-process with env as its whole environment.
func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = c.main(ctx, args)
	return code, out.String(), errb.String()
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// Help is printed once, to stdout, with --flag names; `help CMD` and `CMD --help`
// print the same.
func TestHelpGolden(t *testing.T) {
	code, out, errs := runCLI(t, nil, "", "help")
	if code != 0 || errs != "" {
		t.Fatalf("help: %d %q", code, errs)
	}
	golden(t, "help.golden", out)
	for _, name := range []string{"status", "join", "lease transfer", "exec", "members", "repair"} {
		args := append(strings.Fields(name), "--help")
		code, out, errs := runCLI(t, nil, "", args...)
		if code != 0 || errs != "" {
			t.Fatalf("%s --help: %d %q", name, code, errs)
		}
		golden(t, strings.ReplaceAll(name, " ", "-")+"-help.golden", out)
		if strings.Count(out, "Usage:") != 1 {
			t.Errorf("%s --help prints usage %d times", name, strings.Count(out, "Usage:"))
		}
		if strings.Contains(out, "\n  -data") || strings.Contains(out, " -timeout") {
			t.Errorf("%s --help lists single-dash flags:\n%s", name, out)
		}
		code2, out2, _ := runCLI(t, nil, "", append([]string{"help"}, strings.Fields(name)...)...)
		if code2 != 0 || out2 != out {
			t.Errorf("help %s differs from %s --help", name, name)
		}
	}
	// Every command has help that names it.
	for _, sub := range (&cli{}).root().Commands() {
		code, out, errs := runCLI(t, nil, "", sub.Name(), "--help")
		if code != 0 || !strings.Contains(out, "baton "+sub.Name()) {
			t.Errorf("%s --help: %d %q %q", sub.Name(), code, out, errs)
		}
		if n := strings.Count(out, "Usage:"); n != 1 && sub.Name() != "help" && sub.Name() != "completion" {
			t.Errorf("%s --help prints usage %d times", sub.Name(), n)
		}
		if m := singleDashFlag.FindString(out); m != "" {
			t.Errorf("%s --help lists a single-dash flag (%q)", sub.Name(), strings.TrimSpace(m))
		}
	}
}

// singleDashFlag is a flag listed Go-flag style ("  -events"), not "--events".
var singleDashFlag = regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+\b`)

// Usage mistakes are one line on stderr, nothing on stdout, exit status 2.
func TestUsageErrorsGolden(t *testing.T) {
	dir := t.TempDir()
	cases := [][]string{
		{"frobnicate"},
		{"statu"},
		{"help", "frobnicate"},
		{"status", "--bogus"},
		{"status", "-data", "x"},
		{"status", "extra"},
		{"init", "--new-chain", "--from", "x"},
		{"init"},
		{"run", "--ttl", "soon"},
		{"join"},
		{"join", "--invite-file", "/nonexistent/invite"},
		{"join", "not-an-invite"},
		{"submit", "--path", "a/b"},
		{"submit", "--value", "x"},
		{"submit", "--path", "a/b", "--value", "x", "--wait", "forever"},
		{"lease"},
		{"lease", "grab"},
		{"lease", "transfer"},
		{"lease", "steal"},
		{"lease", "history", "--event", "nap"},
		{"members", "remove"},
		{"exec"},
		{"verify", "a", "b"},
		{"version", "x"},
		{"completion", "tcsh"},
		{"sim", "-seed", "3"},
		{"sim", "--seed", "3", "extra"},
		{"drill", "--bogus"},
	}
	var b strings.Builder
	for _, args := range cases {
		code, out, errs := runCLI(t, map[string]string{"BATON_DATA": dir}, "", args...)
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(errs), "\n") != 0 || errs == "" {
			t.Errorf("%v: code %d, stdout %q, stderr %q: want 2, nothing, one line", args, code, out, errs)
		}
		fmt.Fprintf(&b, "$ baton %s\n%s", strings.Join(args, " "), strings.ReplaceAll(errs, dir, "$DATA"))
	}
	golden(t, "usage-errors.golden", b.String())
}

func TestNoArgs(t *testing.T) {
	code, out, errs := runCLI(t, nil, "")
	if code != 2 || out != "" || !strings.Contains(errs, "Usage:") {
		t.Fatalf("no args: %d %q %q", code, out, errs)
	}
}

// Completion scripts for bash, zsh and fish and the man pages come from the same
// definitions as the help.
func TestCompletionAndMan(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errs := runCLI(t, nil, "", "completion", sh)
		if code != 0 || !strings.Contains(out, "baton") || len(out) < 1000 {
			t.Fatalf("completion %s: %d %q", sh, code, errs)
		}
	}
	// The shell asks the binary for candidates: commands and flags.
	code, out, _ := runCLI(t, nil, "", "__complete", "lease", "")
	for _, want := range []string{"release", "transfer", "steal", "history"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("complete lease: %d %q", code, out)
		}
	}
	code, out, _ = runCLI(t, nil, "", "__complete", "status", "--")
	if code != 0 || !strings.Contains(out, "--timeout") || !strings.Contains(out, "--json") {
		t.Fatalf("complete status flags: %d %q", code, out)
	}
	code, out, errs := runCLI(t, nil, "", "man")
	if code != 0 || !strings.HasPrefix(out, ".nh\n.TH \"BATON\" \"1\"") || !strings.Contains(out, "baton-status(1)") {
		t.Fatalf("man: %d %q %q", code, tail(out, 300), errs)
	}
	dir := t.TempDir()
	if code, _, errs := runCLI(t, nil, "", "man", "--dir", dir); code != 0 {
		t.Fatalf("man --dir: %s", errs)
	}
	page, err := os.ReadFile(filepath.Join(dir, "baton-lease-transfer.1"))
	if err != nil || !strings.Contains(string(page), "--to") {
		t.Fatalf("lease transfer page: %v %q", err, page)
	}
}

func TestEnvFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	// BATON_DATA and BATON_NEW_CHAIN set the flags.
	code, out, errs := runCLI(t, map[string]string{"BATON_DATA": dir, "BATON_NEW_CHAIN": "true"}, "", "init")
	if code != 0 {
		t.Fatalf("init from env: %d %s", code, errs)
	}
	if !strings.Contains(out, "did:key:z6Mk") {
		t.Fatalf("init prints no chain: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, device.ChainKeyFile)); err != nil {
		t.Fatal(err)
	}
	// A flag on the command line wins over the environment.
	other := filepath.Join(t.TempDir(), "other")
	code, _, errs = runCLI(t, map[string]string{"BATON_DATA": dir}, "", "init", "--data", other, "--new-chain")
	if code != 0 {
		t.Fatalf("flag over env: %d %s", code, errs)
	}
	// A bad value in the environment is a usage error naming the variable.
	code, _, errs = runCLI(t, map[string]string{"BATON_NEW_CHAIN": "perhaps"}, "", "init", "--data", t.TempDir())
	if code != 2 || !strings.Contains(errs, "BATON_NEW_CHAIN") {
		t.Fatalf("bad env: %d %q", code, errs)
	}
	if envName("api-token-file") != "BATON_API_TOKEN_FILE" {
		t.Fatal(envName("api-token-file"))
	}
}

func TestInitRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain"); code != 0 {
		t.Fatal(errs)
	}
	before, _ := os.ReadFile(filepath.Join(dir, device.ChainKeyFile))
	code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain")
	if code != 1 || !strings.Contains(errs, "already initialized") {
		t.Fatalf("second init: %d %q", code, errs)
	}
	after, _ := os.ReadFile(filepath.Join(dir, device.ChainKeyFile))
	if !bytes.Equal(before, after) {
		t.Fatal("chain key changed")
	}
}

func TestInitFromDirAndKeyFile(t *testing.T) {
	first := t.TempDir()
	if code, _, errs := runCLI(t, nil, "", "init", "--data", first, "--new-chain"); code != 0 {
		t.Fatal(errs)
	}
	d1, err := device.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(t.TempDir(), "b2")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", second, "--from", first); code != 0 {
		t.Fatal(errs)
	}
	d2, err := device.Open(second)
	if err != nil {
		t.Fatal(err)
	}
	if d2.ID == d1.ID || d2.Chain != d1.Chain || d2.Key == nil || d2.Founder || !bytes.Equal(d2.PSK, d1.PSK) {
		t.Fatalf("from dir: %+v vs %+v", d2, d1)
	}
	lone := t.TempDir()
	if err := transport.WritePSKFile(filepath.Join(lone, "swarm.key"), d1.PSK); err != nil {
		t.Fatal(err)
	}
	third := filepath.Join(t.TempDir(), "b3")
	code, _, errs := runCLI(t, nil, "", "init", "--data", third, "--from", filepath.Join(lone, "swarm.key"))
	if code == 0 || !strings.Contains(errs, "--chain") {
		t.Fatalf("from key file without --chain: %d %q", code, errs)
	}
	code, out, errs := runCLI(t, nil, "", "init", "--data", third, "--from", filepath.Join(lone, "swarm.key"), "--chain", d1.Chain)
	if code != 0 || !strings.Contains(out, "never signs") {
		t.Fatalf("replica init: %d %q %q", code, out, errs)
	}
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("hello"), 0o600)
	code, _, errs = runCLI(t, nil, "", "init", "--data", t.TempDir(), "--from", junk)
	if code != 1 || !strings.Contains(errs, "not an invite and not a network key file") {
		t.Fatalf("junk: %d %q", code, errs)
	}
}

// makeInvite returns an invite for first's chain (no node needed to encode one).
func makeInvite(t *testing.T, first string, exp time.Time) string {
	t.Helper()
	d, err := device.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	in, err := device.NewInvite(d, []string{"/ip4/127.0.0.1/tcp/1/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"},
		[]byte("0123456789abcdef"), exp, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An invite comes from a file or stdin (init --from and join --invite-file); an
// expired one is refused before anything is written.
func TestInviteFromFileAndStdin(t *testing.T) {
	first := mustInit(t)
	inv := makeInvite(t, first, time.Now().Add(time.Hour))
	f := filepath.Join(t.TempDir(), "invite.txt")
	os.WriteFile(f, []byte(inv+"\n"), 0o600)
	dir := filepath.Join(t.TempDir(), "d")
	code, out, errs := runCLI(t, nil, "", "init", "--data", dir, "--from", f)
	if code != 0 || !strings.Contains(out, "--invite-file") {
		t.Fatalf("init --from file: %d %q %q", code, out, errs)
	}
	dir2 := filepath.Join(t.TempDir(), "d2")
	if code, _, errs := runCLI(t, nil, inv, "init", "--data", dir2, "--from", "-"); code != 0 {
		t.Fatalf("init --from -: %s", errs)
	}
	if d, err := device.Open(dir2); err != nil || d.Key == nil {
		t.Fatalf("from stdin: %+v %v", d, err)
	}
	// An invite in argv still works, with a warning.
	dir3 := filepath.Join(t.TempDir(), "d3")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", dir3, "--from", inv); code != 0 || !strings.Contains(errs, "visible to other users") {
		t.Fatalf("init --from INVITE: %d %q", code, errs)
	}
	expired := makeInvite(t, first, time.Now().Add(-time.Minute))
	for _, args := range [][]string{
		{"init", "--data", filepath.Join(t.TempDir(), "x"), "--from", "-"},
		{"join", "--data", filepath.Join(t.TempDir(), "y"), "--listen", "/ip4/127.0.0.1/tcp/0", "--invite-file", "-"},
	} {
		code, _, errs := runCLI(t, nil, expired, args...)
		if code != 1 || !strings.Contains(errs, "invite expired") {
			t.Fatalf("%v expired: %d %q", args, code, errs)
		}
		if _, err := os.Stat(args[2]); !os.IsNotExist(err) {
			t.Fatalf("%v: an expired invite left %s behind: %v", args, args[2], err)
		}
	}
}

// A join the cluster refuses (nobody answers the invite's address here) leaves no keys
// in the new data dir.
func TestJoinFailureLeavesNothing(t *testing.T) {
	first := mustInit(t)
	inv := makeInvite(t, first, time.Now().Add(time.Hour))
	dir := filepath.Join(t.TempDir(), "new")
	code, _, errs := runCLI(t, nil, inv, "join", "--data", dir, "--listen", "/ip4/127.0.0.1/tcp/0",
		"--invite-file", "-", "--join-timeout", "2s", "--log-level", "error")
	if code != 1 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "nothing was kept") {
		t.Fatalf("join to nowhere: %d %q", code, errs)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(dir)
		t.Fatalf("a failed join left %s: %v", dir, ents)
	}
}

func TestRunConfigErrors(t *testing.T) {
	dir := t.TempDir()
	code, _, errs := runCLI(t, nil, "", "run", "--data", dir)
	if code != 1 || !strings.Contains(errs, "not initialized") {
		t.Fatalf("uninitialized: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--from", mustInit(t)); code != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tick", "5s", "--ttl", "2s"}, "must be well below"},
		{[]string{"--ttl", "0s"}, "must be positive"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--raft-log-level", "loud"}, "--raft-log-level"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--listen", ""}, "--listen is empty"},
		{[]string{"--join", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"}, "--join-token"},
		{[]string{"--join", "/ip4/127.0.0.1/tcp/1", "--join-token", "abcd"}, "--join"},
		{[]string{"--api-token-file", "x"}, "goes with --api-addr"},
		{[]string{"--xrpc-addr", "nonsense"}, "--xrpc-addr"},
		{nil, "never joined"},
	} {
		code, _, errs := runCLI(t, nil, "", append([]string{"run", "--data", dir}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("run %v: %d %q, want %q", tc.args, code, errs, tc.want)
		}
	}
}

// mustInit makes a first device's data dir and returns it.
func mustInit(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "first")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain"); code != 0 {
		t.Fatal(errs)
	}
	return dir
}

// drill and bench hand their arguments to testnet and testnet/bench and exit with
// their status.
func TestDrillBenchDispatch(t *testing.T) {
	if code, _, errs := runCLI(t, nil, "", "drill", "--scenario", "no-such-scenario"); code != 2 || !strings.Contains(errs, "no-such-scenario") {
		t.Fatalf("drill with an unknown scenario: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, nil, "", "bench", "--no-such-flag"); code != 2 || errs == "" {
		t.Fatalf("bench with an unknown flag: %d %q", code, errs)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, nil, "", "version")
	if code != 0 || !strings.HasPrefix(out, "baton ") || !strings.Contains(out, "go1.") {
		t.Fatalf("%d %q", code, out)
	}
	code2, out2, _ := runCLI(t, nil, "", "--version")
	if code2 != 0 || out2 != out {
		t.Fatal(out2)
	}
}

func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	unlock2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
