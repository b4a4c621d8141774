package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
)

var opsFlags = []string{"--ttl", "1s", "--tick", "100ms", "--raft-timeout", "300ms", "--log-level", "info"}

func stateOf(data string) (node.State, error) {
	c, err := api.NewClient(filepath.Join(data, api.SocketFile), "")
	if err != nil {
		return node.State{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.State(ctx)
}

// inviteFile asks the node on data for an invite and writes it to a file.
func inviteFile(t *testing.T, data string) string {
	t.Helper()
	code, out, errs := runCLI(t, nil, "", "invite", "--data", data, "--with-chain-key", "--valid-for", "5m")
	if code != 0 {
		t.Fatalf("invite: %d %s", code, errs)
	}
	f := filepath.Join(t.TempDir(), "invite")
	if err := os.WriteFile(f, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

type opsDev struct {
	data   string
	stderr *syncBuffer
	stop   func() int
	wait   func(time.Duration) (int, bool)
}

// TestOperatorsCluster drives a three-device cluster in this process through what
// operators do: watch and exec across a transfer, lease transfer by suffix from the
// holder and from elsewhere, the history's filters and JSON, status and members,
// removing a member (its node stops and does not run again), a listen address in use,
// and a submission without quorum that gives up at --timeout with one clean line.
func TestOperatorsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three nodes")
	}
	devs := make([]*opsDev, 3)
	first := mustInit(t)
	listens := make([]string, 3)
	var usedInvite string
	for i := range devs {
		listens[i] = freeListen(t)
		data := first
		args := []string{"run", "--data", first}
		if i > 0 {
			data = filepath.Join(t.TempDir(), fmt.Sprintf("b%d", i+1))
			usedInvite = inviteFile(t, first)
			args = []string{"join", "--data", data, "--invite-file", usedInvite}
		}
		args = append(args, "--name", fmt.Sprintf("dev-%d", i+1))
		_, stderr, stop, wait := runInProcessWait(t, append(append(args, "--listen", listens[i]), opsFlags...)...)
		devs[i] = &opsDev{data: data, stderr: stderr, stop: stop, wait: wait}
		want := i + 1
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("b%d to join", i+1), func() bool {
			st, err := stateOf(data)
			return err == nil && st.Members == want && st.Raft.Leader != "" && (i > 0 || st.Lease.HeldByMe)
		})
	}
	for i, d := range devs {
		if logs := d.stderr.String(); strings.Contains(logs, "level=WARN") || strings.Contains(logs, "level=ERROR") {
			t.Errorf("b%d logged a warning or an error while the cluster formed:\n%s", i+1, logs)
		}
	}
	holder, other := -1, -1
	var hst node.State
	testutil.WaitFor(t, 10*time.Second, "a holder", func() bool {
		for i, d := range devs {
			if st, err := stateOf(d.data); err == nil && st.Lease.HeldByMe {
				holder, hst = i, st
				return true
			}
		}
		return false
	})
	other = (holder + 1) % 3
	ost, _ := stateOf(devs[other].data)

	// status: quorum, members with reachability, one count.
	// Reachability is recent contact, which a loaded machine can miss for a moment:
	// the status is read until it says all of it (or the deadline).
	// Names: each device's own (--name) and the others', learned from them.
	statusWants := []string{`quorum\s+ok \(3 of 3 voters reachable, 2 needed\)`, `members: 3\n`, `voter,leader`, `held by this device`,
		`device\s+\S+ \(dev-\d\)`, `\sdev-1\s`, `\sdev-2\s`, `\sdev-3\s`}
	var code int
	var out string
	if err := wait.For(20*time.Second, "status to show the whole cluster", func() bool {
		code, out, _ = runCLI(t, nil, "", "status", "--data", devs[holder].data)
		for _, want := range statusWants {
			if code != 0 || !regexp.MustCompile(want).MatchString(out) {
				return false
			}
		}
		return true
	}); err != nil {
		for _, want := range statusWants {
			if code != 0 || !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
	}

	// -o json is each command's --json; a command without one says so.
	code, out, _ = runCLI(t, nil, "", "status", "-o", "json", "--data", devs[holder].data)
	var js node.State
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.ID != hst.ID {
		t.Errorf("status -o json: %d\n%s", code, out)
	}
	if code, _, errs := runCLI(t, nil, "", "lease", "release", "-o", "json", "--data", devs[other].data); code != 2 || !strings.Contains(errs, "has no JSON output") {
		t.Errorf("-o json on a command without JSON: %d %q", code, errs)
	}

	// health --cluster: every member asked through one device, all healthy, exit 0.
	if err := wait.For(20*time.Second, "health --cluster to say all three are healthy", func() bool {
		code, out, _ = runCLI(t, nil, "", "health", "--cluster", "--data", devs[other].data)
		return code == 0 && strings.Contains(out, "cluster healthy") && strings.Count(out, "  healthy  ") == 3 &&
			strings.Contains(out, "(this device)") && strings.Contains(out, ",holder")
	}); err != nil {
		t.Errorf("health --cluster: %d\n%s", code, out)
	}

	// watch on a standby, and exec on the holder, which the transfer below stops.
	wout, _, wstop := runInProcess(t, "watch", "--data", devs[other].data)
	testutil.WaitFor(t, 10*time.Second, "watch to print the current lease", func() bool { return strings.Contains(wout.String(), "current") })
	var eout, eerr syncBuffer
	execDone := make(chan int, 1)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &eout, stderr: &eerr, getenv: func(string) string { return "" }}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		execDone <- c.main(ctx, []string{"exec", "--data", devs[holder].data, "--grace", "5s", "--",
			"sh", "-c", `echo started; trap 'echo got-term; exit 0' TERM; while true; do sleep 0.05; done`})
	}()
	testutil.WaitFor(t, 20*time.Second, "exec to start its command", func() bool { return strings.Contains(eout.String(), "started") })

	suffix := "…" + ost.ID[len(ost.ID)-6:]
	code, _, errs := runCLI(t, nil, "", "lease", "transfer", "--data", devs[holder].data, "--to", "12D3KooW")
	if code != 2 || !strings.Contains(errs, "ambiguous") {
		t.Errorf("ambiguous prefix: %d %q", code, errs)
	}
	code, _, errs = runCLI(t, nil, "", "lease", "transfer", "--data", devs[other].data, "--to", "…"+hst.ID[len(hst.ID)-6:])
	if code != 2 || !strings.Contains(errs, "holds the lease already") || repeatsPrefix(errs) {
		t.Errorf("transfer to the holder: %d %q", code, errs)
	}
	// Asked of a standby (here: bring the lease to this device), the transfer goes to
	// the holder, which does it.
	code, out, errs = runCLI(t, nil, "", "lease", "transfer", "--data", devs[other].data, "--to", suffix)
	if code != 0 || !strings.Contains(out, "transferred to "+shortPeer(ost.ID)) || !strings.Contains(out, "asked of the holder "+shortPeer(hst.ID)) {
		t.Fatalf("transfer by suffix, asked of a standby: %d %q %q", code, out, errs)
	}
	select {
	case code := <-execDone:
		if code != 1 || !strings.Contains(eout.String(), "got-term") || !strings.Contains(eerr.String(), "the lease hold ended") {
			t.Errorf("exec after the transfer: %d\nstdout %q\nstderr %q", code, eout.String(), eerr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("exec did not stop its command when the hold ended")
	}
	testutil.WaitFor(t, 10*time.Second, "watch to print the transfer", func() bool {
		return regexp.MustCompile(`transfer\s+epoch \d+\s+holder ` + regexp.QuoteMeta(shortPeer(ost.ID)) + ` \(this device\)`).MatchString(wout.String())
	})
	if code := wstop(); code != 0 {
		t.Errorf("watch after Ctrl-C: %d", code)
	}

	// The history: renewals folded, filters, snake_case JSON, a release's time.
	testutil.WaitFor(t, 10*time.Second, "the transfer's target to hold", func() bool {
		st, err := stateOf(devs[other].data)
		return err == nil && st.Lease.HeldByMe
	})
	testutil.WaitFor(t, 10*time.Second, "the old holder to see the new one", func() bool {
		st, err := stateOf(devs[holder].data)
		return err == nil && st.Lease.Holder == ost.ID
	})
	code, out, errs = runCLI(t, nil, "", "lease", "release", "--data", devs[holder].data)
	if code != 0 || !strings.Contains(out, "released") || !strings.Contains(out, "asked of the holder "+shortPeer(ost.ID)) {
		t.Errorf("release asked of a standby: %d %q %q", code, out, errs)
	}
	code, out, _ = runCLI(t, nil, "", "lease", "history", "--data", devs[holder].data, "--event", "transfer,release", "--json")
	var hist []map[string]any
	if err := json.Unmarshal([]byte(out), &hist); code != 0 || err != nil || len(hist) < 2 {
		t.Fatalf("history --json: %d %v %q", code, err, out)
	}
	for _, e := range hist {
		if e["event"] != "transfer" && e["event"] != "release" {
			t.Errorf("--event let %v through", e["event"])
		}
		if _, ok := e["lease_ts"]; !ok || e["Index"] != nil {
			t.Errorf("history JSON keys: %v", e)
		}
		if _, ok := e["ts"]; ok && e["event"] == "release" {
			t.Errorf("a release with a time of its own: %v", e)
		}
	}
	// Consecutive renewals of one hold (the folded form): a transfer's new holder now
	// renews at the transfer's epoch, so renewals before it are no longer a run.
	testutil.WaitFor(t, 20*time.Second, "a run of renewals in the history", func() bool {
		_, out, _ := runCLI(t, nil, "", "lease", "history", "--data", devs[holder].data)
		return strings.Contains(out, "renew ×")
	})
	code, out, _ = runCLI(t, nil, "", "lease", "history", "--data", devs[holder].data)
	if code != 0 || !strings.Contains(out, "renew ×") || !strings.Contains(out, "(no time; last renewal") {
		t.Errorf("history:\n%s", out)
	}

	// Remove a member from elsewhere: its node notices, stops and exits; restarted, it
	// refuses with one line.
	victim := 3 - holder - other
	vst, _ := stateOf(devs[victim].data)
	code, out, errs = runCLI(t, nil, "", "members", "remove", "--data", devs[holder].data, vst.ID[:20])
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("members remove: %d %q %q", code, out, errs)
	}
	testutil.WaitFor(t, 20*time.Second, "two members after the removal", func() bool {
		st, err := stateOf(devs[holder].data)
		return err == nil && st.Members == 2
	})
	// members lists the removed device too.
	if err := wait.For(20*time.Second, "members to list the removed device", func() bool {
		code, out, _ = runCLI(t, nil, "", "members", "--data", devs[holder].data)
		return code == 0 && strings.Contains(out, "removed: 1") && strings.Contains(out, vst.ID)
	}); err != nil {
		t.Errorf("members after the removal: %d\n%s", code, out)
	}
	// The members' logs name the removed device as status does (issue 39 item 6).
	named := regexp.MustCompile(`msg="member removed" [^\n]*peer="dev-\d \(\S{8}\)"`)
	if err := wait.For(10*time.Second, "a log line naming the removed device", func() bool {
		for _, d := range devs {
			if named.MatchString(d.stderr.String()) {
				return true
			}
		}
		return false
	}); err != nil {
		t.Errorf("%v: no member logged `member removed` with the device's name:\n%s", err, tail(devs[holder].stderr.String(), 3000))
	}
	if c, ok := devs[victim].wait(20 * time.Second); !ok || c != exitRemoved || !strings.Contains(devs[victim].stderr.String(), "was removed from its cluster by another member") {
		t.Errorf("the removed node: exited %v, status %d\n%s", ok, c, tail(devs[victim].stderr.String(), 1500))
	}
	code, _, errs = runCLI(t, nil, "", append([]string{"run", "--data", devs[victim].data, "--listen", listens[victim]}, opsFlags...)...)
	if code != exitRemoved || !strings.Contains(errs, "was removed from its cluster") {
		t.Errorf("restart of a removed device: %d %q", code, errs)
	}

	// An invite already used: the cluster refuses it, one line, nothing kept.
	refused := filepath.Join(t.TempDir(), "refused")
	code, _, errs = runCLI(t, nil, "", append([]string{"join", "--data", refused, "--invite-file", usedInvite, "--listen", "/ip4/127.0.0.1/tcp/0"}, append(opsFlags, "--log-level", "warn")...)...)
	if code != 1 || !strings.Contains(errs, "refused the invite") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("a used invite: %d %q", code, errs)
	}
	if _, err := os.Stat(refused); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(refused)
		t.Errorf("the refused join left %s: %v", refused, ents)
	}

	// A listen address another device uses: refused at start, one line, nothing kept.
	fresh := filepath.Join(t.TempDir(), "fresh")
	code, _, errs = runCLI(t, nil, "", append([]string{"join", "--data", fresh, "--invite-file", inviteFile(t, first), "--listen", listens[holder]}, append(opsFlags, "--log-level", "warn")...)...)
	if code != 1 || !strings.Contains(errs, "already in use") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("listen in use: %d %q", code, errs)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("the refused join left %s", fresh)
	}

	// No quorum: stop the other voter; a submission gives up at --timeout, in one line.
	if code := devs[other].stop(); code != 0 {
		t.Errorf("graceful stop: exit %d\n%s", code, devs[other].stderr.String())
	}
	if logs := devs[other].stderr.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("a graceful stop logged an error:\n%s", logs)
	}
	testutil.WaitFor(t, 20*time.Second, "the survivor to lose its quorum", func() bool {
		st, err := stateOf(devs[holder].data)
		return err == nil && !st.Quorum.OK
	})
	// health --cluster names the member that does not answer, exit 1.
	code, out, errs = runCLI(t, nil, "", "health", "--cluster", "--data", devs[holder].data)
	if code != 1 || !strings.Contains(out, "unreachable") || !strings.Contains(errs, "1 of 2 members unhealthy or unreachable") {
		t.Errorf("health --cluster without the other member: %d\n%s\n%s", code, out, errs)
	}
	if err := wait.For(20*time.Second, "status to say the quorum is lost", func() bool {
		code, out, _ = runCLI(t, nil, "", "status", "--data", devs[holder].data)
		return code == 0 && strings.Contains(out, "LOST: no Raft leader")
	}); err != nil {
		t.Errorf("status without quorum:\n%s", out)
	}
	start := time.Now()
	code, _, errs = runCLI(t, nil, "", "submit", "--data", devs[holder].data, "--path", "posts/q", "--value", "x", "--timeout", "2s")
	took := time.Since(start)
	if code != 1 || took > 10*time.Second || strings.Count(strings.TrimSpace(errs), "\n") != 0 || repeatsPrefix(errs) {
		t.Errorf("submit without quorum: %d after %s: %q", code, took, errs)
	}
	t.Logf("submit without quorum: %s after %s", strings.TrimSpace(errs), took.Round(time.Millisecond))
}

// repeatsPrefix reports an error line whose parts repeat ("transfer: transfer: ...").
func repeatsPrefix(s string) bool {
	parts := strings.Split(strings.TrimSpace(s), ": ")
	for i := 1; i < len(parts); i++ {
		if parts[i] == parts[i-1] {
			return true
		}
	}
	return false
}
