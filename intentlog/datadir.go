package intentlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// HasState reports whether dir holds a Raft log of its own: a device that has been
// bootstrapped or has joined a cluster. A fresh (or never started) data dir has
// none. It only looks at the files; it opens nothing.
func HasState(dir string) (bool, error) {
	fi, err := os.Stat(filepath.Join(dir, RaftFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look for %s: %w", RaftFile, err)
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("%s in %s is not a regular file", RaftFile, dir)
	}
	return fi.Size() > 0, nil
}
