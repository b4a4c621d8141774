package device

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/batonhq/baton/intentlog"
)

// Missing key files (issue 20 item 5). identity.key is the device's peer ID, which is
// its Raft server ID: a new one on a data dir with a Raft log runs a stranger on that
// log (and the members know the old ID). chain.key is what makes a device sign: a
// signer that lost it would carry on as a replica and nobody would notice until the
// last signer failed. Neither is ever replaced or dropped silently.

// checkIdentityPresent refuses a data dir with history (a Raft log) whose identity.key
// is gone; a dir without history gets a new identity (LoadOrCreateIdentity).
func checkIdentityPresent(dir string) error {
	_, err := os.Stat(filepath.Join(dir, IdentityFile))
	if !errors.Is(err, fs.ErrNotExist) {
		return nil // there (LoadOrCreateIdentity checks it), or unreadable (it says so)
	}
	has, herr := intentlog.HasState(dir)
	if herr != nil || !has {
		return herr
	}
	return fmt.Errorf("%w: %s is gone but this data dir has a Raft log (%s): the device's identity is its member ID, and a new one would run as a stranger on that log; "+
		"restore %s from a backup of this device and start again; if it is lost for good, remove this device from the cluster on another member (baton members remove ID), "+
		"move %s aside and join again with a new invite (baton join)",
		ErrMissingKey, filepath.Join(dir, IdentityFile), intentlog.RaftFile, IdentityFile, dir)
}

// checkNoChainKey decides about a data dir without chain.key: a replica (made without
// it) is fine; a device made with it (device.json says so, or, for a device.json from
// before that was recorded, the founder, which always had it) refuses.
func checkNoChainKey(dir string, doc Doc) error {
	signer := doc.First
	if doc.Signer != nil {
		signer = *doc.Signer
	}
	if !signer {
		return nil
	}
	return fmt.Errorf("%w: %s is gone but this device was made with the chain key (%s): without it the device would run as a replica and never sign; "+
		"restore %s from a backup (or copy it from another signer of %s) and start again; "+
		"to run this device as a replica on purpose, set \"signer\": false in %s",
		ErrMissingKey, filepath.Join(dir, ChainKeyFile), DeviceFile, ChainKeyFile, doc.Chain, filepath.Join(dir, DeviceFile))
}
