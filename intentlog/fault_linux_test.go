//go:build linux

package intentlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// A real full disk: state.db on a small tmpfs, filled up by another file. The apply
// blocks retrying with Fault set; once space is freed it goes on and nothing is lost.
// Needs root (mount); skipped otherwise.
func TestWriteFaultRealENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (the injected-fault tests cover the logic)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); the injected-fault tests cover the logic", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := &harness{t: t, f: f}
	held(h)
	// Fill what is left of the file system.
	filler := filepath.Join(dir, "filler")
	fh, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{1}, 64<<10)
	for {
		if _, err := fh.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	fh.Close()
	retried := make(chan struct{}, 1)
	real := f.retryWait
	f.retryWait = func(n int) bool {
		select {
		case retried <- struct{}{}:
		default:
		}
		return real(n)
	}
	done := make(chan []any)
	big := bytes.Repeat([]byte("v"), 256<<10)
	go func() {
		done <- f.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, one(Intent{ID: "big", Op: OpPut, Path: "c/1", Value: big}))}})
	}()
	select {
	case <-retried:
	case out := <-done:
		t.Fatalf("the write did not fail on a full tmpfs: %#v", out)
	}
	if err := f.Fault(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fault on a full disk: %v", err)
	}
	t.Logf("reported: %v", f.Fault())
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if r, ok := out[0].(Result); !ok || !r.Accepted {
		t.Fatalf("after space was freed: %#v", out[0])
	}
	if f.Fault() != nil || f.View().Pending != 1 {
		t.Fatalf("fault %v, view %+v", f.Fault(), f.View())
	}
}
