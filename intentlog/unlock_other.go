//go:build !unix

package intentlog

import "os"

// unlockFile: bbolt's lock elsewhere goes with the file (see unlock_unix.go).
func unlockFile(*os.File) {}
