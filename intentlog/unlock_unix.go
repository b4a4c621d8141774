//go:build unix

package intentlog

import (
	"os"
	"syscall"
)

// unlockFile drops bbolt's flock on f. Closing f is not enough after a failed open:
// the file stays referenced by the memory map bbolt made, and the lock with it.
func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
