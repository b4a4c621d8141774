package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every manual page has EXIT STATUS (with 3: removed), ENVIRONMENT and FILES, before
// SEE ALSO (a9e37ae's pages had none of them).
func TestManPagesHaveExitStatusFilesEnvironment(t *testing.T) {
	check := func(name, page string) {
		t.Helper()
		for _, want := range []string{".SH EXIT STATUS", "RestartPreventExitStatus=3 4", ".SH ENVIRONMENT", "BATON_DATA", ".SH FILES", "removed.json"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
		if i := strings.Index(page, ".SH SEE ALSO"); i >= 0 && i < strings.Index(page, ".SH FILES") {
			t.Errorf("%s: FILES after SEE ALSO", name)
		}
	}
	code, out, errs := runCLI(t, nil, "", "man")
	if code != 0 {
		t.Fatalf("man: %d %s", code, errs)
	}
	check("baton(1)", out)
	dir := t.TempDir()
	if code, _, errs := runCLI(t, nil, "", "man", "--dir", dir); code != 0 {
		t.Fatalf("man --dir: %d %s", code, errs)
	}
	for _, p := range []string{"baton-run.1", "baton-status.1"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		check(p, string(b))
	}
}
