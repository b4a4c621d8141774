package intentlog

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHasState(t *testing.T) {
	dir := t.TempDir()
	if has, err := HasState(dir); err != nil || has {
		t.Fatalf("empty dir: %v %v", has, err)
	}
	if err := os.WriteFile(filepath.Join(dir, RaftFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if has, err := HasState(dir); err != nil || has {
		t.Fatalf("empty raft.db: %v %v", has, err)
	}
	if err := os.WriteFile(filepath.Join(dir, RaftFile), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if has, err := HasState(dir); err != nil || !has {
		t.Fatalf("raft.db with data: %v %v", has, err)
	}
	sub := t.TempDir()
	if err := os.Mkdir(filepath.Join(sub, RaftFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := HasState(sub); err == nil {
		t.Fatal("a directory named raft.db is not state")
	}
}
