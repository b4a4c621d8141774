package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// An --api that names no running node says what was tried: a data dir given as --api
// is its socket; host:port without a scheme is http://host:port. a9e37ae answered
// both with "no node is running ... start one with `baton run --data ~/.baton`".
func TestAPIFlagTargetsAndErrors(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t) // closed again: nothing listens there
	cases := []struct {
		api, want string
	}{
		{dir, "no node answers at " + filepath.Join(dir, "baton.sock") + " (from --api " + dir + ")"},
		{addr, "no node answers at http://" + addr + " (from --api " + addr + ")"},
		{"http://" + addr, "no node answers at http://" + addr + ":"},
	}
	for _, tc := range cases {
		code, _, errs := runCLI(t, nil, "", "status", "--api", tc.api, "--data", filepath.Join(dir, "elsewhere"))
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "baton run --data") {
			t.Errorf("status --api %s: %d %q, want %q", tc.api, code, errs, tc.want)
		}
	}
	code, _, errs := runCLI(t, nil, "", "status", "--data", filepath.Join(dir, "none"))
	if code != 1 || !strings.Contains(errs, "BATON_DATA") {
		t.Errorf("status without a node: %d %q", code, errs)
	}
}
