package intentlog

import (
	"errors"
	"path/filepath"
	"testing"
)

// Reading a stopped device's damaged raft.db (a drill's checker does) is an error,
// never a panic: bbolt asserts on a torn page, and the pages of a truncated file fault.
func TestReadRaftLogOfDamagedFile(t *testing.T) {
	dir, _ := oneNodeWithMarker(t)
	n := 0
	if err := ReadRaftLog(dir, 1, func(RaftEntry) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("intact file: %d entries, %v", n, err)
	}
	p := filepath.Join(dir, RaftFile)
	zeroPages(t, p, 2) // bbolt asserts (panics) on a page that does not say what it is
	if err := ReadRaftLog(dir, 1, func(RaftEntry) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("zeroed pages: %v", err)
	}
}
