package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// TestGracefulStopIsNoWarningOnTheLeader: a member stopped gracefully (Ctrl-C) says
// goodbye, and the Raft leader logs "member stopped" once instead of a warning for
// every failed heartbeat and replication to it (issue 39 item 5: the README says a
// clean Ctrl-C logs no warnings); once it runs again, the goodbye is forgotten (a
// crash of it then warns as before).
func TestGracefulStopIsNoWarningOnTheLeader(t *testing.T) {
	root, psk, key := t.TempDir(), testutil.PSK(t), testutil.Key(t, 1)
	c := &capture{}
	cfg := nodeConfig(t, filepath.Join(root, "a"), psk, key)
	cfg.Bootstrap = true
	cfg.Logger = slog.New(c)
	cfg.RaftLogLevel = slog.LevelDebug
	a := startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "a holds", a.Holds)
	nodes := joinTwo(t, root, psk, key, a)
	testutil.WaitFor(t, 10*time.Second, "a leads Raft", func() bool { return a.State().Raft.Role == "Leader" })
	b := nodes[1]
	bid := b.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Raft keeps trying b: wait for a few of its failures, logged below warn.
	about := func(level slog.Level, exact bool) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, r := range c.recs {
			if !contactMsgs[r.Message] || !strings.Contains(recordText(r), bid) {
				continue
			}
			if r.Level == level || !exact && r.Level >= level {
				n++
			}
		}
		return n
	}
	testutil.WaitFor(t, 20*time.Second, "Raft failed to reach the stopped member a few times", func() bool { return about(slog.LevelDebug, true) >= 3 })
	if n := about(slog.LevelWarn, false); n > 0 {
		t.Fatalf("%d warnings on the leader for a member stopped gracefully", n)
	}
	c.mu.Lock()
	said := false
	for _, r := range c.recs {
		said = said || r.Message == "member stopped (a graceful stop): it is not expected to answer until it runs again"
	}
	c.mu.Unlock()
	if !said {
		t.Fatal("the leader did not log that the member stopped")
	}
	// Started again, it is heard from: its failures are warnings again.
	startNode(t, nodeConfig(t, filepath.Join(root, "b"), psk, key))
	testutil.WaitFor(t, 20*time.Second, "the leader forgets the goodbye of the member running again", func() bool {
		return !a.namesDeparted([]any{"peer", bid})
	})
}

// recordText is a record's message and attribute values.
func recordText(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Value.String()); return true })
	return b.String()
}
