package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestReloadAppliesLogLevels (issue 39 item 6: a reload): the settings file is read
// again; the log levels change at once, other changed settings are named as taking
// effect at the next start, and a bad file changes nothing.
func TestReloadAppliesLogLevels(t *testing.T) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	addRunFlags(fs, false)
	if err := fs.Parse([]string{"--ttl", "5s"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, nil))
	logs := &logState{}
	logs.level.Set(slog.LevelInfo)
	logs.raftLevel.Set(slog.LevelWarn)
	path := filepath.Join(t.TempDir(), "baton")
	settings := "# /etc/default/baton\nBATON_LOG_LEVEL=debug\nBATON_RAFT_LOG_LEVEL=\"error\"\n\nBATON_TICK=1s\nBATON_TTL=9s\n"
	if err := os.WriteFile(path, []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	reload(path, fs, logs, logger)
	if logs.level.Level() != slog.LevelDebug || logs.raftLevel.Level() != slog.LevelError {
		t.Fatalf("levels after reload: %v %v", logs.level.Level(), logs.raftLevel.Level())
	}
	// --ttl was given on the command line: the file's BATON_TTL never applies to it.
	if s := out.String(); !strings.Contains(s, "at_next_start=tick") || strings.Contains(s, "ttl") {
		t.Fatalf("reload log: %s", s)
	}
	if err := os.WriteFile(path, []byte("LOG_LEVEL=warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	reload(path, fs, logs, logger)
	if logs.level.Level() != slog.LevelDebug || !strings.Contains(out.String(), "nothing changed") {
		t.Fatalf("a bad file: level %v, log %s", logs.level.Level(), out.String())
	}
}
