package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

// The end-to-end tests run the real binary: TestMain builds it once.
var batonBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "baton-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	batonBin = filepath.Join(dir, "baton")
	if !testing.Short() {
		// -buildvcs=auto overrides a GOFLAGS=-buildvcs=false: `baton version` then
		// names the checkout's revision (TestE2EVersionRevision).
		cmd := exec.Command("go", "build", "-buildvcs=auto", "-o", batonBin, ".")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build baton:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// e2eFlags are the fast timings of the test cluster (one machine, loopback).
var e2eFlags = []string{"--ttl", "1s", "--tick", "100ms", "--raft-timeout", "300ms", "--log-level", "debug"}

// bin runs the binary to completion (bounded) and returns its exit code and output.
func bin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, batonBin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("baton %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// cleanEnv is the test's environment without BATON_* variables that would change flags.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			env = append(env, kv)
		}
	}
	return env
}

func mustBin(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := bin(t, "", args...)
	if code != 0 {
		t.Fatalf("baton %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// proc is a running `baton run` or `baton join`.
type proc struct {
	name   string
	data   string
	listen string
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	log    bytes.Buffer
	err    error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start runs the binary in the background; t.Cleanup kills it.
func start(t *testing.T, name, data, listen string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, data: data, listen: listen, done: make(chan struct{})}
	p.cmd = exec.Command(batonBin, args...)
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s logs (last 4 KiB):\n%s", p.name, tail(p.logs(), 4096))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die", p.name)
	}
}

func freeListen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)
}

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for i := 0; time.Now().Before(deadline) && i < 100000; i++ {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		time.Sleep(50 * time.Millisecond) // poll interval, bounded by the deadline
	}
	t.Fatalf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
}

func client(t *testing.T, data string) *api.Client {
	t.Helper()
	c, err := api.NewClient(filepath.Join(data, api.SocketFile), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func state(data string) (node.State, error) {
	c, err := api.NewClient(filepath.Join(data, api.SocketFile), "")
	if err != nil {
		return node.State{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.State(ctx)
}

// TestE2ECluster drives three processes of the real binary: form a cluster with
// invites, submit over the socket (CLI and Go client), kill -9 the holder, take over,
// export and verify, restart the dead device and watch it catch up, stop gracefully.
func TestE2ECluster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs the binary")
	}
	root := t.TempDir()
	data := []string{filepath.Join(root, "b1"), filepath.Join(root, "b2"), filepath.Join(root, "b3")}
	procs := make([]*proc, 3)

	// Device 1: a new chain; bootstraps on its first run.
	out := mustBin(t, "init", "--data", data[0], "--new-chain")
	did := ""
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "did:key:") {
			did = f
		}
	}
	if did == "" {
		t.Fatalf("init printed no chain: %s", out)
	}
	l1 := freeListen(t)
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := apiLn.Addr().String()
	apiLn.Close()
	procs[0] = start(t, "b1", data[0], l1, append([]string{"run", "--data", data[0], "--listen", l1, "--api-addr", apiAddr}, e2eFlags...)...)
	eventually(t, 20*time.Second, "b1 to lead and hold the lease", func() (bool, string) {
		st, err := state(data[0])
		if err != nil {
			return false, err.Error()
		}
		return st.Raft.Role == "Leader" && st.Lease.HeldByMe, fmt.Sprintf("%+v %+v", st.Raft, st.Lease)
	})

	// The TCP API always needs a token: run made one in DIR/api.token (0600), which
	// the CLI reads; without it, or with a wrong one, the node answers unauthorized.
	tokFile := filepath.Join(data[0], "api.token")
	if fi, err := os.Stat(tokFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("api token file: %v %v", fi, err)
	}
	if out := mustBin(t, "status", "--data", data[0], "--api", "http://"+apiAddr, "--json"); !strings.Contains(out, `"held_by_me": true`) {
		t.Fatalf("status over TCP: %s", out)
	}
	wrong := filepath.Join(t.TempDir(), "wrong.token")
	if err := os.WriteFile(wrong, []byte("wrong-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := bin(t, "", "status", "--api", "http://"+apiAddr, "--api-token-file", wrong); code != 1 || !strings.Contains(errs, "unauthorized") {
		t.Fatalf("wrong token: %d %q", code, errs)
	}
	if code, _, errs := bin(t, "", "status", "--api", "http://"+apiAddr, "--data", t.TempDir()); code != 1 || !strings.Contains(errs, "unauthorized") {
		t.Fatalf("no token: %d %q", code, errs)
	}

	// Device 2: init --from an invite, then join with it. Device 3: join alone (it
	// initializes from the invite).
	for i := 1; i < 3; i++ {
		invite := strings.TrimSpace(mustBin(t, "invite", "--data", data[0], "--with-chain-key", "--valid-for", "5m"))
		if !strings.HasPrefix(invite, "baton1") || strings.Contains(invite, "\n") {
			t.Fatalf("invite: %q", invite)
		}
		invFile := filepath.Join(root, fmt.Sprintf("invite%d", i+1))
		if err := os.WriteFile(invFile, []byte(invite+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			mustBin(t, "init", "--data", data[i], "--from", invFile)
		}
		l := freeListen(t)
		procs[i] = start(t, fmt.Sprintf("b%d", i+1), data[i], l, append([]string{"join", "--data", data[i], "--listen", l, "--invite-file", invFile}, e2eFlags...)...)
		want := i + 1
		eventually(t, 30*time.Second, fmt.Sprintf("b%d to join", i+1), func() (bool, string) {
			st, err := state(data[i])
			if err != nil {
				return false, err.Error()
			}
			return st.Members == want && st.Raft.Leader != "", fmt.Sprintf("members %d leader %q", st.Members, st.Raft.Leader)
		})
	}
	out = mustBin(t, "status", "--data", data[2])
	for _, want := range []string{`device\s+12D3`, `lease\s+12D3\w+( \(this device\))?, epoch \d+, (expires in|held by this device)`, `head\s+(seq \d+|empty chain)`,
		`quorum\s+ok \(`, `members: 3\n`, `voter,leader`, `self`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	// Submit through the CLI on a follower, signed; then the same id again.
	acked := map[string]bool{}
	out = mustBin(t, "submit", "--data", data[1], "--id", "cli-1", "--path", "posts/1", "--value", "hello", "--wait", "signed")
	if !strings.HasPrefix(out, "signed id=cli-1") || !strings.Contains(out, "seq=") {
		t.Fatalf("submit: %q", out)
	}
	acked["cli-1"] = true
	out = mustBin(t, "submit", "--data", data[2], "--id", "cli-1", "--path", "posts/1", "--value", "hello")
	if !strings.Contains(out, "duplicate") {
		t.Fatalf("resubmit: %q", out)
	}
	if code, _, errs := bin(t, "", "submit", "--data", data[1], "--path", "nocollection", "--value", "x"); code != 2 || !strings.Contains(errs, "path") {
		t.Fatalf("bad path: %d %q", code, errs)
	}
	// The apply's own rule at the CLI entrance: a control character in the ID (issue 19.1).
	if code, _, errs := bin(t, "", "submit", "--data", data[1], "--id", "bad\x01id", "--path", "posts/c", "--value", "x"); code != 2 || !strings.Contains(errs, "control character") {
		t.Fatalf("control character in the id: %d %q", code, errs)
	}
	// The Go client on another device, and value from stdin.
	c3 := client(t, data[2])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("go-%d", i)
		if _, err := c3.Submit(ctx, intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: fmt.Sprintf("posts/g%d", i), Value: []byte("v")}, node.WaitCommitted); err != nil {
			t.Fatalf("client submit %s: %v", id, err)
		}
		acked[id] = true
	}
	if code, out, errs := bin(t, "from stdin", "submit", "--data", data[0], "--id", "stdin-1", "--path", "posts/s", "--file", "-", "--wait", "signed"); code != 0 || !strings.Contains(out, "signed") {
		t.Fatalf("stdin submit: %d %q %q", code, out, errs)
	}
	acked["stdin-1"] = true
	if v, ok, err := c3.Record(ctx, "posts/1"); err != nil || !ok || string(v) != "hello" {
		// records are signed state: wait for the commit to reach b3
		eventually(t, 10*time.Second, "posts/1 on b3", func() (bool, string) {
			v, ok, err := c3.Record(ctx, "posts/1")
			return err == nil && ok && string(v) == "hello", fmt.Sprint(string(v), ok, err)
		})
	}

	// kill -9 the holder: another device takes over and the chain continues.
	holder, hst := findHolder(t, data)
	killedAt := time.Now()
	procs[holder].kill9(t)
	survivor := (holder + 1) % 3
	var after node.State
	eventually(t, 20*time.Second, "a takeover after kill -9", func() (bool, string) {
		for i := range data {
			if i == holder {
				continue
			}
			st, err := state(data[i])
			if err == nil && st.Lease.HeldByMe && st.Lease.Epoch > hst.Lease.Epoch {
				after, survivor = st, i
				return true, ""
			}
		}
		return false, "no new holder"
	})
	takeover := time.Since(killedAt)
	t.Logf("takeover after kill -9 of b%d: b%d holds epoch %d after %s (TTL 1s)", holder+1, survivor+1, after.Lease.Epoch, takeover.Round(time.Millisecond))
	out = mustBin(t, "submit", "--data", data[survivor], "--id", "after-kill", "--path", "posts/k", "--value", "k", "--wait", "signed")
	acked["after-kill"] = true
	if !strings.Contains(out, "signed") {
		t.Fatal(out)
	}

	// Export and verify.
	exportFile := filepath.Join(root, "chain.ndjson")
	exp := mustBin(t, "export", "--data", data[survivor])
	if err := os.WriteFile(exportFile, []byte(exp), 0o600); err != nil {
		t.Fatal(err)
	}
	out = mustBin(t, "verify", "--chain", did, exportFile)
	if !strings.HasPrefix(out, "ok: ") || !strings.Contains(out, "head seq") {
		t.Fatalf("verify: %q", out)
	}
	// Every acknowledged intent exactly once; epochs increase across the kill.
	seen := map[string]int{}
	var lastEpoch uint64
	sc := bufio.NewScanner(strings.NewReader(exp))
	sc.Buffer(nil, 64<<20)
	lines := 0
	for sc.Scan() {
		var l api.CommitJSON
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		c, err := chain.Decode(l.CBOR)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range c.Ops {
			seen[op.ID]++
		}
		lastEpoch = c.Epoch
		lines++
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Errorf("intent %s appears %d times in the chain", id, seen[id])
		}
	}
	if lastEpoch <= hst.Lease.Epoch {
		t.Errorf("last commit epoch %d, not after the killed holder's %d", lastEpoch, hst.Lease.Epoch)
	}
	// A tampered export fails with the seq of the problem; verify reads stdin too.
	tampered := strings.Replace(exp, `"epoch":`, `"epoch":9`, 1)
	if code, out, errs := bin(t, tampered, "verify", "--chain", did, "-"); code != 1 || !strings.Contains(errs, "seq 1") {
		t.Fatalf("tampered verify: %d %q %q", code, out, errs)
	}
	other, _ := chain.GenerateKey(nil)
	if code, _, errs := bin(t, exp, "verify", "--chain", other.DID()); code != 1 || !strings.Contains(errs, "wrong_chain") {
		t.Fatalf("wrong chain: %d %q", code, errs)
	}

	// The killed device restarts (same data dir and port) and catches up.
	k := holder
	procs[k] = start(t, fmt.Sprintf("b%d-restarted", k+1), data[k], procs[k].listen, append([]string{"run", "--data", data[k], "--listen", procs[k].listen}, e2eFlags...)...)
	sst, _ := state(data[survivor])
	eventually(t, 30*time.Second, "the restarted device to catch up", func() (bool, string) {
		st, err := state(data[k])
		if err != nil {
			return false, err.Error()
		}
		return st.Head.Seq >= sst.Head.Seq && st.Head.Seq > 0, fmt.Sprintf("head %d want %d", st.Head.Seq, sst.Head.Seq)
	})
	out = mustBin(t, "submit", "--data", data[k], "--id", "after-restart", "--path", "posts/r", "--value", "r", "--wait", "signed")
	if !strings.Contains(out, "signed") {
		t.Fatal(out)
	}

	// tail follows the chain from seq 1, one line per commit, new commits included;
	// SIGINT ends it with status 0.
	tp := start(t, "tail", data[k], "", "tail", "--data", data[k], "--from", "1")
	eventually(t, 10*time.Second, "tail to show the chain", func() (bool, string) {
		l := tp.logs()
		return strings.Contains(l, "seq 1 ") && strings.Contains(l, "put posts/r"), tail(l, 300)
	})
	mustBin(t, "submit", "--data", data[survivor], "--id", "while-tailing", "--path", "posts/t", "--value", "t")
	eventually(t, 10*time.Second, "tail to follow a new commit", func() (bool, string) {
		return strings.Contains(tp.logs(), "put posts/t"), tail(tp.logs(), 300)
	})
	if err := tp.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tp.done:
		if tp.err != nil {
			t.Fatalf("tail after SIGINT: %v", tp.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not stop on SIGINT")
	}

	// The lease history has the claims.
	hist := mustBin(t, "lease", "history", "--data", data[k])
	if !strings.Contains(hist, "claim") {
		t.Errorf("lease history: %s", hist)
	}

	// SIGTERM stops the holder gracefully (exit 0, lease released): another device
	// holds the lease again within a few Raft round trips, far below the TTL wait.
	h2, h2st := findHolder(t, data)
	if err := procs[h2].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-procs[h2].done:
	case <-time.After(20 * time.Second):
		t.Fatal("SIGTERM did not stop the node")
	}
	if procs[h2].err != nil {
		t.Fatalf("graceful stop exit: %v\n%s", procs[h2].err, tail(procs[h2].logs(), 2000))
	}
	eventually(t, 10*time.Second, "a holder after the graceful stop", func() (bool, string) {
		for i := range data {
			if i == h2 {
				continue
			}
			if st, err := state(data[i]); err == nil && st.Lease.HeldByMe && st.Lease.Epoch > h2st.Lease.Epoch {
				return true, ""
			}
		}
		return false, "no holder"
	})
	_ = lines

	// The stopped device comes back; then another device leaves gracefully and the
	// others see two members.
	procs[h2] = start(t, fmt.Sprintf("b%d-again", h2+1), data[h2], procs[h2].listen, append([]string{"run", "--data", data[h2], "--listen", procs[h2].listen}, e2eFlags...)...)
	eventually(t, 20*time.Second, "the stopped device to rejoin", func() (bool, string) {
		st, err := state(data[h2])
		return err == nil && st.Raft.Leader != "" && st.Head.Seq > 0, fmt.Sprint(err)
	})
	leaver := (h2 + 1) % 3
	out = mustBin(t, "leave", "--data", data[leaver])
	if !strings.Contains(out, "left the cluster") {
		t.Fatalf("leave: %q", out)
	}
	// leave stops the node: the process exits by itself, saying so, with status 0.
	select {
	case <-procs[leaver].done:
		if procs[leaver].err != nil || !strings.Contains(procs[leaver].logs(), "this device left the cluster") {
			t.Fatalf("the node that left: %v\n%s", procs[leaver].err, tail(procs[leaver].logs(), 1000))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the node that left keeps running")
	}
	// Restarted, the departed device refuses at once with a clear message, and its
	// status says it left.
	code, _, errs := bin(t, "", append([]string{"run", "--data", data[leaver], "--listen", procs[leaver].listen}, e2eFlags...)...)
	if code != exitRemoved || !strings.Contains(errs, "left its cluster") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("restart after leave: %d %q", code, errs)
	}
	if code, _, errs := bin(t, "", "status", "--data", data[leaver]); code != 1 || !strings.Contains(errs, "left its cluster") {
		t.Fatalf("status after leave: %d %q", code, errs)
	}
	stay := 3 - h2 - leaver
	eventually(t, 10*time.Second, "two members after the leave", func() (bool, string) {
		st, err := state(data[stay])
		return err == nil && st.Members == 2, fmt.Sprint(st.Members, err)
	})
	out = mustBin(t, "submit", "--data", data[stay], "--id", "after-leave", "--path", "posts/l", "--value", "l", "--wait", "signed")
	if !strings.Contains(out, "signed") {
		t.Fatal(out)
	}
}

// findHolder polls until a device says it holds the lease (HeldByMe is briefly false
// around lease writes).
func findHolder(t *testing.T, data []string) (int, node.State) {
	t.Helper()
	idx, st := -1, node.State{}
	eventually(t, 10*time.Second, "a lease holder", func() (bool, string) {
		for i := range data {
			if s, err := state(data[i]); err == nil && s.Lease.HeldByMe {
				idx, st = i, s
				return true, ""
			}
		}
		return false, "nobody holds"
	})
	return idx, st
}

// TestE2EClientErrors: commands against a data dir without a running node fail with
// one clear line.
func TestE2EClientErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"status", "--data", dir},
		{"submit", "--data", dir, "--path", "a/b", "--value", "x"},
		{"export", "--data", dir},
		{"lease", "history", "--data", dir},
		{"leave", "--data", dir},
	} {
		code, _, errs := runCLI(t, nil, "", args...)
		if code != 1 || !strings.Contains(errs, "no node is running") || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: %d %q", args, code, errs)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--path", "a/b"}, "exactly one of --value"},
		{[]string{"submit", "--value", "x"}, "--path is required"},
		{[]string{"submit", "--path", "a/b", "--value", "x", "--wait", "forever"}, "--wait"},
		{[]string{"submit", "--path", "a/b", "--value", "x", "--del"}, "exactly one"},
		{[]string{"lease"}, "want a subcommand"},
		{[]string{"lease", "grab"}, "unknown subcommand"},
		{[]string{"lease", "transfer"}, "--to PEER is required"},
		{[]string{"lease", "steal"}, "--reason"},
		{[]string{"invite", "--data", dir, "--valid-for", "1s"}, "--valid-for"},
		{[]string{"invite", "--data", dir, "--ttl", "1s"}, "--valid-for"},
		{[]string{"invite", "--data", dir, "--ttl", "1m", "--valid-for", "1m"}, "old name"},
		{[]string{"status", "extra"}, "unexpected argument"},
		{[]string{"demo", "--rate", "0"}, "--rate"},
	} {
		code, _, errs := runCLI(t, nil, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestInviteIgnoresRunsTTL: BATON_TTL is the lease TTL of `baton run` (a service's
// environment file sets it); invite's validity is --valid-for (BATON_VALID_FOR).
// Before, invite's flag was --ttl too, so BATON_TTL=5s made every invite expire in
// 5 s, or refused it as shorter than a minute (issue 39 item 9).
func TestInviteIgnoresRunsTTL(t *testing.T) {
	dir := t.TempDir()
	code, _, errs := runCLI(t, map[string]string{"BATON_TTL": "5s"}, "", "invite", "--data", dir)
	if code == 2 || strings.Contains(errs, "must be between") {
		t.Fatalf("BATON_TTL=5s reached invite: %d %q", code, errs)
	}
	code, _, errs = runCLI(t, map[string]string{"BATON_VALID_FOR": "5s"}, "", "invite", "--data", dir)
	if code != 2 || !strings.Contains(errs, "BATON_VALID_FOR") && !strings.Contains(errs, "--valid-for") {
		t.Fatalf("BATON_VALID_FOR=5s: %d %q", code, errs)
	}
}

// TestDemo runs the demo in-process: it must pass its own checks.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs three nodes for several seconds")
	}
	code, out, errs := runCLI(t, nil, "", "demo", "--ttl", "1s", "--tick", "100ms")
	if code != 0 || !strings.Contains(out, "OK: no fork") {
		t.Fatalf("demo: %d\n%s\n%s", code, out, errs)
	}
}
