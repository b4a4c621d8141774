package node

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ReplacesFile in a data dir names the device this one replaces (written by `baton
// restore`): once this device is a member, it removes that identity from the cluster
// (keepReplacing), and the file goes.
const ReplacesFile = "replaces.json"

type replacesDoc struct {
	ID string `json:"id"`
}

// WriteReplaces records in dir that the device there replaces the device id.
func WriteReplaces(dir, id string) error {
	b, _ := json.Marshal(replacesDoc{ID: id})
	return writeSynced(filepath.Join(dir, ReplacesFile), append(b, '\n'))
}

// replaceEvery is how often a device that replaces another tries to remove it.
const replaceEvery = 2 * time.Second

// keepReplacing removes the device named in ReplacesFile from the cluster once this
// device is a member, retrying until it succeeds or the node stops.
func (n *Node) keepReplacing() {
	path := filepath.Join(n.cfg.DataDir, ReplacesFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || n.cluster == nil {
		return
	}
	var doc replacesDoc
	if err != nil || json.Unmarshal(b, &doc) != nil || doc.ID == "" {
		n.logger.Warn("the record of the device this one replaces is unreadable; remove it yourself (baton members remove ID)", "file", path)
		return
	}
	t := time.NewTicker(replaceEvery)
	defer t.Stop()
	warned := false
	for {
		if n.isLocalMember(n.id) {
			err := error(nil)
			if n.isLocalMember(doc.ID) {
				err = n.RemoveMember(n.ctx, doc.ID)
			}
			if err == nil {
				_ = os.Remove(path)
				n.logger.Info("removed the device this one was restored from (its old identity)", "old", doc.ID)
				return
			}
			if !warned {
				n.logger.Warn("could not remove the device this one was restored from yet; retrying", "old", doc.ID, "err", err)
				warned = true
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}
