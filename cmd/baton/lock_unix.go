//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is held (flock) by the process running a node on a data dir: a second
// `baton run` on the same dir fails at once with a clear message instead of blocking
// on the stores' file locks.
const lockFile = "baton.lock"

// lockDataDir takes the data dir's lock; release it with the returned func.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := ""
		if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 {
			pid = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another baton is already running on %s%s", dir, pid)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
