package node

import (
	"path/filepath"
	"strings"
	"testing"
)

// Device names (issue 39 item 6): what a name may be, and the names a device learned
// survive its restart (a member that is down is still named).
func TestNames(t *testing.T) {
	for _, ok := range []string{"laptop", "home-server", "pi4.kitchen", "a", strings.Repeat("x", MaxNameLen)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "my laptop", "a/b", "é", strings.Repeat("x", MaxNameLen+1)} {
		if err := ValidName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if d := DefaultName(); d != "" && ValidName(d) != nil {
		t.Errorf("the default name %q is not valid", d)
	}
	dir := t.TempDir()
	ns := loadNames(dir)
	if err := ns.set("12D3KooWpeer", "phone"); err != nil {
		t.Fatal(err)
	}
	if got := loadNames(dir).get("12D3KooWpeer"); got != "phone" {
		t.Fatalf("after a restart: %q, want phone (%s)", got, filepath.Join(dir, NamesFile))
	}
}
