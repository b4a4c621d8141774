package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/device"
)

// Issue 20 item 5 at the command line: `baton run` on a data dir with history whose
// identity.key or chain.key was deleted refuses, says what to do, and writes no new
// key.
func TestRunRefusesMissingKeys(t *testing.T) {
	for _, gone := range []string{device.IdentityFile, device.ChainKeyFile} {
		t.Run(gone, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dev")
			if code, _, errs := runCLI(t, nil, "", "init", "--data", dir, "--new-chain"); code != 0 {
				t.Fatal(errs)
			}
			// History: a Raft log (intentlog.HasState looks at raft.db only).
			if err := os.WriteFile(filepath.Join(dir, intentlog.RaftFile), []byte("raft log"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, gone)); err != nil {
				t.Fatal(err)
			}
			code, _, errs := runCLI(t, nil, "", "run", "--data", dir, "--listen", "/ip4/127.0.0.1/tcp/0")
			if code == 0 || !strings.Contains(errs, gone+" is gone") || !strings.Contains(errs, "restore") {
				t.Fatalf("run without %s: exit %d, %q", gone, code, errs)
			}
			if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
				t.Fatalf("run wrote a new %s: %v", gone, err)
			}
		})
	}
}
