package testnet

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// A device removed (`baton members remove`) while it was down learns it from the
// first member it reaches when it runs again, and stops with exit status 3 and the
// removal message, as when it is removed while running; on a9e37ae it ran forever as
// a Raft candidate ("quorum LOST") and systemd kept it running.
func TestProcsRemovedWhileDownStopsWithExit3(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	bin := testutil.BatonBinary(t)
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: 3, Dir: t.TempDir(), SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := pc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, _, ok := pc.Holder()
	if !ok {
		t.Fatal("no holder")
	}
	var victim *Device
	for _, d := range pc.Devices() {
		if d != h && d.Index != 0 {
			victim = d
			break
		}
	}
	if _, ok := pc.stateOf(victim); !ok {
		t.Fatal("victim not answering")
	}
	id := victim.ID()
	if err := pc.Stop(ctx, victim); err != nil {
		t.Fatal(err)
	}
	out, err := pc.runCLI(ctx, "members", "remove", "--data", h.Dir, id)
	if err != nil || !strings.Contains(out, "removed") {
		t.Fatalf("members remove: %v %q", err, out)
	}
	if err := pc.until(ctx, h, "two members", func() bool {
		st, ok := pc.stateOf(h)
		return ok && st.Members == 2
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if !victim.proc.waitExit(60 * time.Second) {
		t.Fatalf("the removed device still runs 60 s after its restart:\n%s", tailFile(victim.Dir+".log", 15))
	}
	victim.proc.mu.Lock()
	code := victim.proc.cmd.ProcessState.ExitCode()
	victim.proc.mu.Unlock()
	log, _ := os.ReadFile(victim.Dir + ".log")
	if code != 3 || !strings.Contains(string(log), "was removed from its cluster by another member") {
		t.Fatalf("exit status %d (want 3):\n%s", code, tailFile(victim.Dir+".log", 15))
	}
	// And it stays stopped: run again, it refuses at once with the same message.
	out, err = pc.runCLI(ctx, "run", "--data", victim.Dir, "--listen", "/ip4/127.0.0.1/tcp/0")
	if err == nil || !strings.Contains(err.Error(), "was removed from its cluster") {
		t.Fatalf("run after the removal: %v %q", err, out)
	}
}
