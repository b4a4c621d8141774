package intentlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CleanFile marks a state file that was closed cleanly (synced to disk). It sits
// beside StateFile.
//
// state.db is written without an fsync per transaction: Raft's log (raft.db, fsynced
// on every append) and its snapshots are the durable record, and state.db is a
// checkpoint of their apply. A per-apply fsync of state.db doubled the disk waits of
// every proposal (one for the log, one for the state) and was the largest share of an
// intent's latency. What that changes on a crash:
//
//   - a process crash loses nothing: committed bbolt transactions are in the page
//     cache, and the file is consistent;
//   - a machine crash (power loss, kernel panic) can leave state.db behind or torn,
//     because bbolt without fsync does not order its data and meta page writes.
//
// So a state file is trusted only if it was closed cleanly: Close syncs it and then
// writes CleanFile; Open removes CleanFile (durably) before the first write. A state
// file found without CleanFile is set aside (renamed StateFile+".unclean", or
// ".unclean.1", ".unclean.2", ... when that name is taken: an earlier set-aside file is
// never overwritten) and the state is rebuilt from Raft's latest snapshot and the log after
// it, which Raft keeps for exactly this (TrailingLogs). Restart after a crash thus
// costs a replay of at most SnapshotThreshold+TrailingLogs entries; nothing
// acknowledged is lost, because nothing acknowledged was only in state.db.
const CleanFile = "state.clean"

// prepareState makes the state file at path safe to open: it sets aside a state file
// not closed cleanly, then removes the clean marker durably, before anything is
// written.
func prepareState(path string) error {
	dir := filepath.Dir(path)
	clean := filepath.Join(dir, CleanFile)
	_, serr := os.Stat(path)
	_, cerr := os.Stat(clean)
	switch {
	case serr == nil && errors.Is(cerr, fs.ErrNotExist):
		if _, err := setAside(path, "unclean"); err != nil {
			return fmt.Errorf("set aside unclean state: %w", err)
		}
	case serr != nil && !errors.Is(serr, fs.ErrNotExist):
		return fmt.Errorf("stat state: %w", serr)
	case cerr != nil && !errors.Is(cerr, fs.ErrNotExist):
		return fmt.Errorf("stat clean marker: %w", cerr)
	}
	if err := removeIfExists(clean); err != nil {
		return fmt.Errorf("remove clean marker: %w", err)
	}
	syncDir(dir)
	return nil
}

// markClean records that the state file at path was synced and closed.
func markClean(path string) error {
	dir := filepath.Dir(path)
	f, err := os.OpenFile(filepath.Join(dir, CleanFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("mark state clean: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mark state clean: %w", err)
	}
	syncDir(dir)
	return nil
}
