package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// TestRunTellsSystemdWhenReady: under systemd's Type=notify (NOTIFY_SOCKET set), run
// sends STATUS= lines and READY=1 once the device has caught up, and STOPPING=1 when
// it stops (issue 39 item 6: the unit was Type=simple, ready before it had a quorum).
func TestRunTellsSystemdWhenReady(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node")
	}
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	data := mustInit(t)
	_, stderr, stop := runInProcess(t, append([]string{"run", "--data", data, "--listen", freeListen(t)}, opsFlags...)...)
	var got []string
	read := func(until string) {
		t.Helper()
		buf := make([]byte, 4096)
		for !strings.Contains(strings.Join(got, "\n"), until) {
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s: %v (got %q)\n%s", until, err, got, stderr.String())
			}
			got = append(got, string(buf[:n]))
		}
	}
	read("READY=1")
	if !strings.Contains(strings.Join(got, "\n"), "STATUS=ready: holder") {
		t.Errorf("no ready status before READY=1: %q", got)
	}
	if code := stop(); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	read("STOPPING=1")
}

// TestReadinessWaitsForTheCluster: not ready while unhealthy, without a quorum or
// behind the commit index.
func TestReadinessWaitsForTheCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		want string
	}{
		{"unhealthy", false, "not ready: catching up"},
		{"no quorum", false, "waiting for a quorum"},
		{"behind", false, "catching up: applied 3 of 9"},
		{"ready", true, "ready: standby"},
	} {
		st := stateForReadiness(tc.name)
		ok, status := readiness(st)
		if ok != tc.ok || !strings.Contains(status, tc.want) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, ok, status, tc.ok, tc.want)
		}
	}
}

func stateForReadiness(name string) (st node.State) {
	st.ID, st.Signer, st.Healthy = "me", true, true
	st.Quorum.OK, st.Quorum.Voters, st.Quorum.Reachable, st.Quorum.Needed = true, 3, 3, 2
	st.Raft.AppliedIndex, st.Raft.CommitIndex = 9, 9
	switch name {
	case "unhealthy":
		st.Healthy, st.Problem = false, "catching up: a restored older copy?"
	case "no quorum":
		st.Quorum.OK, st.Quorum.Reachable = false, 1
	case "behind":
		st.Raft.AppliedIndex = 3
	}
	return st
}
