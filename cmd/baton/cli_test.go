package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// runCLI runs the CLI in-process with env as its whole environment.
func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = c.main(ctx, args)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runCLI(t, nil, "", "help")
	if code != 0 || !strings.Contains(out, "Commands:") || !strings.Contains(out, "demo") {
		t.Fatalf("help: code %d\n%s", code, out)
	}
	code, _, errs := runCLI(t, nil, "")
	if code != 2 || !strings.Contains(errs, "Usage: baton") {
		t.Fatalf("no args: code %d, stderr %q", code, errs)
	}
	for _, cmd := range commands {
		code, out, errs := runCLI(t, nil, "", cmd.name, "--help")
		if cmd.name == "drill" || cmd.name == "bench" {
			continue // dispatched to testnet, which prints its own help
		}
		if code != 0 || !strings.Contains(out, "Usage: baton "+cmd.name) {
			t.Errorf("%s --help: code %d, stdout %q, stderr %q", cmd.name, code, out, errs)
		}
		code2, out2, _ := runCLI(t, nil, "", "help", cmd.name)
		if code2 != code || out2 != out {
			t.Errorf("help %s differs from %s --help", cmd.name, cmd.name)
		}
	}
}

func TestUnknownCommandAndFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"init", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"init", "--data", t.TempDir()}, "give exactly one of --new-chain or --from"},
		{[]string{"init", "--data", t.TempDir(), "--new-chain", "--from", "x"}, "give exactly one"},
		{[]string{"init", "--data", t.TempDir(), "--new-chain", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "--ttl", "soon"}, "invalid value"},
		{[]string{"join"}, "want exactly one INVITE"},
		{[]string{"join", "not-an-invite"}, "not a valid invite"},
		{[]string{"verify", "a", "b"}, "one FILE at most"},
		{[]string{"verify", "--chain", "did:key:nope"}, "--chain"},
		{[]string{"version", "x"}, "unexpected argument"},
	}
	for _, tc := range cases {
		code, _, errs := runCLI(t, nil, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: code %d, stderr %q, want 2 and %q", tc.args, code, errs, tc.want)
		}
		if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: error is not one line: %q", tc.args, errs)
		}
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
	if _, err := os.Stat(filepath.Join(dir, chainKeyFile)); err != nil {
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
	before, _ := os.ReadFile(filepath.Join(dir, chainKeyFile))
	code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain")
	if code != 1 || !strings.Contains(errs, "already initialized") {
		t.Fatalf("second init: %d %q", code, errs)
	}
	after, _ := os.ReadFile(filepath.Join(dir, chainKeyFile))
	if !bytes.Equal(before, after) {
		t.Fatal("chain key changed")
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %v %v", st.Mode(), err)
	}
	d, err := loadDevice(dir)
	if err != nil || d.key == nil || !d.first {
		t.Fatalf("loadDevice: %+v %v", d, err)
	}
}

func TestInitFromDirAndKeyFile(t *testing.T) {
	first := t.TempDir()
	if code, _, errs := runCLI(t, nil, "", "init", "--data", first, "--new-chain"); code != 0 {
		t.Fatal(errs)
	}
	d1, err := loadDevice(first)
	if err != nil {
		t.Fatal(err)
	}
	// From another device's data dir: same network key and chain key, another identity.
	second := filepath.Join(t.TempDir(), "b2")
	if code, _, errs := runCLI(t, nil, "", "init", "--data", second, "--from", first); code != 0 {
		t.Fatal(errs)
	}
	d2, err := loadDevice(second)
	if err != nil {
		t.Fatal(err)
	}
	if d2.id == d1.id || d2.chain != d1.chain || d2.key == nil || d2.first || !bytes.Equal(d2.psk, d1.psk) {
		t.Fatalf("from dir: %+v vs %+v", d2, d1)
	}
	// From a lone network key file: needs --chain, then a replica without the key.
	lone := t.TempDir()
	if err := transport.WritePSKFile(filepath.Join(lone, "swarm.key"), d1.psk); err != nil {
		t.Fatal(err)
	}
	third := filepath.Join(t.TempDir(), "b3")
	code, _, errs := runCLI(t, nil, "", "init", "--data", third, "--from", filepath.Join(lone, "swarm.key"))
	if code == 0 || !strings.Contains(errs, "--chain") {
		t.Fatalf("from key file without --chain: %d %q", code, errs)
	}
	code, out, errs := runCLI(t, nil, "", "init", "--data", third, "--from", filepath.Join(lone, "swarm.key"), "--chain", d1.chain)
	if code != 0 || !strings.Contains(out, "never signs") {
		t.Fatalf("replica init: %d %q %q", code, out, errs)
	}
	d3, err := loadDevice(third)
	if err != nil || d3.key != nil || d3.chain != d1.chain {
		t.Fatalf("replica: %+v %v", d3, err)
	}
	// Garbage.
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("hello"), 0o600)
	code, _, errs = runCLI(t, nil, "", "init", "--data", t.TempDir(), "--from", junk)
	if code != 1 || !strings.Contains(errs, "not an invite and not a network key file") {
		t.Fatalf("junk: %d %q", code, errs)
	}
	code, _, errs = runCLI(t, nil, "", "init", "--data", t.TempDir(), "--from", "/nonexistent/x")
	if code != 1 || !strings.Contains(errs, "neither an invite") {
		t.Fatalf("missing: %d %q", code, errs)
	}
}

func testInvite(t *testing.T, withKey bool) (string, invite, *chain.Ed25519Key) {
	t.Helper()
	key, err := chain.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	psk, _ := transport.GeneratePSK()
	in := invite{psk: psk, chain: key.DID(), token: []byte("0123456789abcdef"),
		addrs: []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"},
		exp:   time.Now().Add(time.Hour).Truncate(time.Second)}
	var seed []byte
	if withKey {
		dir := t.TempDir()
		if err := chain.SaveKey(filepath.Join(dir, "k"), key); err != nil {
			t.Fatal(err)
		}
		if seed, err = chainKeySeed(filepath.Join(dir, "k")); err != nil {
			t.Fatal(err)
		}
	}
	s, err := encodeInvite(in, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s, in, key
}

func TestInviteRoundTrip(t *testing.T) {
	s, in, key := testInvite(t, true)
	if !strings.HasPrefix(s, "baton1") || strings.ContainsAny(s, " \n=+/") {
		t.Fatalf("not a one-line url-safe token: %q", s)
	}
	got, err := decodeInvite(s + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.chain != in.chain || !bytes.Equal(got.psk, in.psk) || string(got.token) != string(in.token) ||
		!got.exp.Equal(in.exp) || got.key == nil || got.key.DID() != key.DID() || got.expired(time.Now()) {
		t.Fatalf("round trip: %+v", got)
	}
	s2, _, _ := testInvite(t, false)
	if got, err := decodeInvite(s2); err != nil || got.key != nil {
		t.Fatalf("no key: %+v %v", got, err)
	}
	// init --from an invite (a file holding it): keys taken, identity new.
	f := filepath.Join(t.TempDir(), "invite.txt")
	os.WriteFile(f, []byte(s+"\n"), 0o600)
	dir := filepath.Join(t.TempDir(), "d")
	code, out, errs := runCLI(t, nil, "", "init", "--data", dir, "--from", f)
	if code != 0 || !strings.Contains(out, "baton join") {
		t.Fatalf("init --from invite file: %d %q %q", code, out, errs)
	}
	d, err := loadDevice(dir)
	if err != nil || d.key == nil || d.chain != key.DID() || !bytes.Equal(d.psk, in.psk) {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestInviteBad(t *testing.T) {
	good, _, _ := testInvite(t, true)
	raw, _ := base64.RawURLEncoding.DecodeString(good[len(invitePrefix):])
	mutate := func(f func(m map[string]any)) string {
		var m map[string]any
		json.Unmarshal(raw, &m)
		f(m)
		b, _ := json.Marshal(m)
		return invitePrefix + base64.RawURLEncoding.EncodeToString(b)
	}
	other, _ := chain.GenerateKey(nil)
	cases := map[string]string{
		"prefix":    "baton2" + good[6:],
		"truncated": good[:len(good)-7] + "!",
		"json":      invitePrefix + base64.RawURLEncoding.EncodeToString([]byte("{")),
		"version":   mutate(func(m map[string]any) { m["v"] = 2 }),
		"unknown":   mutate(func(m map[string]any) { m["x"] = 1 }),
		"net":       mutate(func(m map[string]any) { m["net"] = "AAAA" }),
		"chain":     mutate(func(m map[string]any) { m["chain"] = "did:key:zzz" }),
		"key":       mutate(func(m map[string]any) { m["chain"] = other.DID() }),
		"addrs":     mutate(func(m map[string]any) { m["addrs"] = []string{} }),
		"addr":      mutate(func(m map[string]any) { m["addrs"] = []string{"/ip4/1.2.3.4/tcp/1"} }),
		"token":     mutate(func(m map[string]any) { m["token"] = "" }),
		"exp":       mutate(func(m map[string]any) { delete(m, "exp") }),
		"long":      invitePrefix + strings.Repeat("A", maxInviteLen),
	}
	for name, s := range cases {
		if _, err := decodeInvite(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
		code, _, errs := runCLI(t, nil, "", "join", "--data", t.TempDir(), s)
		if code != 2 || !strings.Contains(errs, "not a valid invite") {
			t.Errorf("%s: join: %d %q", name, code, errs)
		}
	}
	expired := mutate(func(m map[string]any) { m["exp"] = time.Now().Add(-time.Minute).Unix() })
	dir := filepath.Join(t.TempDir(), "d")
	code, _, errs := runCLI(t, nil, "", "join", "--data", dir, "--listen", "/ip4/127.0.0.1/tcp/0", expired)
	if code != 1 || !strings.Contains(errs, "expired") {
		t.Fatalf("expired: %d %q", code, errs)
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
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--listen", ""}, "--listen is empty"},
		{[]string{"--join", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"}, "--join-token"},
		{[]string{"--join", "/ip4/127.0.0.1/tcp/1", "--join-token", "abcd"}, "--join"},
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
	if code != 0 || !strings.HasPrefix(out, "baton ") {
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
