package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDrillMainUsage(t *testing.T) {
	ctx := context.Background()
	var out, errb bytes.Buffer
	// Help once, on stdout, flags as --flag; a bad flag is one line on stderr.
	if code := DrillMain(ctx, []string{"--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "kill-holder") ||
		!strings.Contains(out.String(), "--scenario") || errb.Len() != 0 || strings.Count(out.String(), "Usage:") != 1 {
		t.Fatalf("--help: code %d, out %q, err %q", code, out.String(), errb.String())
	}
	for _, args := range [][]string{
		{"--scenario", "nope"},
		{"--nodes", "9"},
		{"--ttl", "100ms", "--tick", "200ms"},
		{"--rounds", "0"},
		{"--bogus"},
		{"extra"},
		{"--format", "plc"},
	} {
		errb.Reset()
		if code := DrillMain(ctx, args, &out, &errb); code != 2 || errb.Len() == 0 || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%v: code %d, stderr %q", args, code, errb.String())
		}
	}
}

func TestDrillMainRunsAndWritesReports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	var out, errb syncBuf
	code := DrillMain(ctx, []string{"--scenario", "kill-holder", "--ttl", "1s", "--tick", "100ms", "--out", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"kill      kill d", "PASS kill-holder", "SCENARIO", "report:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, out.String())
		}
	}
	js, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s Suite
	if err := json.Unmarshal(js, &s); err != nil {
		t.Fatal(err)
	}
	if !s.OK || len(s.Reports) != 1 || s.Reports[0].Check.Acked == 0 {
		t.Fatalf("report.json: %+v", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		t.Fatal(err)
	}
}
