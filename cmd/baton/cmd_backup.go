package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// A backup is what a device needs to come back as a new member, never a data dir that
// could run as the old one (issue 38 item 5): the network key, the chain key and its
// history marker, the chain itself (for the record and for `baton verify`), and
// backup.json (which device it was, its members, the head). `baton restore` makes a
// new data dir from it: the same keys, a new device identity, and replaces.json, with
// which its first `baton join` removes the old identity from the cluster once it has
// joined. Its state re-syncs from the others, like etcd's snapshot restore brings a
// member back as a new one.

// BackupFile describes a backup (in the backup dir).
const BackupFile = "backup.json"

// BackupChainFile is the chain as NDJSON (baton export's format) in a backup dir.
const BackupChainFile = "chain.ndjson"

// backupDoc is backup.json.
type backupDoc struct {
	Version int       `json:"version"`
	Device  string    `json:"device"` // the backed-up device's peer ID
	Chain   string    `json:"chain"`
	Taken   time.Time `json:"taken"`
	Members []string  `json:"members,omitempty"` // the other members' peer IDs
	// HeadSeq and HeadHash: the chain in BackupChainFile ends there (0: no chain
	// copied: the device was not running).
	HeadSeq  uint64 `json:"head_seq"`
	HeadHash string `json:"head_hash,omitempty"`
}

const backupLong = `Writes a backup of a device to a new directory: the network key, the chain key and
the chain key's history marker, the chain as NDJSON (when the device runs: read
through its API, up to its head at that moment) and backup.json (the device's ID,
its members, the head). The device's identity, Raft log, state and mark are not
copied: a backup is not a data dir and never runs as the device it came from.

Bring a device back from a backup with baton restore: a new member with the same
keys, which removes the old one from the cluster once it has joined and re-syncs
the state from the others.

A data dir copied by hand and put back is recognised as restored when its mark
beside it survived or a member remembers what it stored, and then waits until it
has caught up; a copy started beside its original is stopped as a clone. See
docs/DESIGN.md, "Repair, restore and backups".`

const restoreLong = `Makes a new data dir from a backup (baton backup): the backup's keys and a new
device identity. Then join it as usual: baton invite on a running member, and
baton join --data DIR --invite-file FILE here. Once it has joined, it removes the
device the backup came from (its old identity) from the cluster, and its state
re-syncs from the other members.

If no member holds the chain any longer, a backup cannot start the chain again
(a second history of the key is refused); its chain.ndjson is the record of what was
signed.`

func (c *cli) backupCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "backup --out DIR [--data DIR]", Short: "write a backup of this device (keys, chain, members) to a new directory",
		Long: backupLong, Example: "  baton backup --data ~/.baton --out /mnt/usb/baton-2026-12-07", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Minute, "reading the chain")
	out := cmd.Flags().String("out", "", "the backup `dir` to create (must not exist)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *out == "" {
			return usagef("backup needs --out DIR")
		}
		return c.backup(cmd.Context(), f, *out)
	}
	return cmd
}

func (c *cli) backup(ctx context.Context, f *apiFlags, out string) (err error) {
	d, err := device.Open(*f.data)
	if err != nil {
		return err
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("backup: %s exists: give a new directory", out)
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(out) // nothing half-written is left to be taken for a backup
		}
	}()
	for _, name := range []string{device.NetworkKeyFile, device.ChainKeyFile, device.DeviceFile, node.GenesisFileName} {
		b, err := os.ReadFile(filepath.Join(d.Dir, name))
		if errors.Is(err, fs.ErrNotExist) && name != device.NetworkKeyFile {
			continue // a replica has no chain key; a chain not yet started has no marker
		}
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o600); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
	}
	doc := backupDoc{Version: 1, Device: d.ID.String(), Chain: d.Chain, Taken: time.Now().UTC()}
	if ms, err := transport.KnownMembers(d.Dir); err == nil {
		for _, m := range ms {
			doc.Members = append(doc.Members, m.String())
		}
	}
	running := false
	if cl, err := f.client(); err == nil {
		defer cl.Close()
		sctx, cancel := f.ctx(ctx)
		defer cancel()
		if st, err := cl.State(sctx); err == nil {
			running = true
			if doc.HeadSeq, doc.HeadHash, err = writeChain(sctx, cl, filepath.Join(out, BackupChainFile), st.Head.Seq); err != nil {
				return fmt.Errorf("backup: the chain: %w", f.apiErr(err))
			}
		}
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(filepath.Join(out, BackupFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if running {
		fmt.Fprintf(c.stdout, "backup of %s in %s: keys, members and the chain up to seq %d\n", shortPeer(doc.Device), out, doc.HeadSeq)
	} else {
		fmt.Fprintf(c.stdout, "backup of %s in %s: keys and members (the device is not running: no chain copied; run it and back up again for the chain)\n", shortPeer(doc.Device), out)
	}
	fmt.Fprintf(c.stdout, "it holds the chain key: keep it as safe as the device. Restore with: baton restore --from %s --data NEWDIR\n", out)
	return nil
}

// writeChain writes commits 1..head as NDJSON to path and returns the last seq and hash.
func writeChain(ctx context.Context, cl *api.Client, path string, head uint64) (uint64, string, error) {
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, "", err
	}
	defer fh.Close()
	if head == 0 {
		return 0, "", fh.Close()
	}
	enc := json.NewEncoder(fh)
	var last uint64
	var hash string
	for ac := range cl.Commits(ctx, 1, false) {
		if ac.Err != nil {
			return 0, "", ac.Err
		}
		if ac.Seq > head {
			break
		}
		hash = hex.EncodeToString(ac.Hash[:])
		if err := enc.Encode(api.CommitJSON{Seq: ac.Seq, Hash: hash, Epoch: ac.Epoch, Signer: ac.Signer, CBOR: ac.Raw}); err != nil {
			return 0, "", err
		}
		last = ac.Seq
	}
	if last != head {
		return 0, "", fmt.Errorf("read %d of %d commits", last, head)
	}
	return last, hash, fh.Sync()
}

func (c *cli) restoreCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "restore --from BACKUP [--data DIR]", Short: "make a new device from a backup; its first join removes the old one",
		Long: restoreLong, Example: "  baton restore --from /mnt/usb/baton-2026-12-07 --data ~/.baton\n  baton join --data ~/.baton --invite-file invite.txt", Args: noArgs}
	data := dataFlag(cmd.Flags())
	from := cmd.Flags().String("from", "", "the backup `dir` (baton backup --out)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *from == "" {
			return usagef("restore needs --from BACKUP")
		}
		b, err := os.ReadFile(filepath.Join(*from, BackupFile))
		if err != nil {
			return fmt.Errorf("restore: %s is not a backup (baton backup writes %s): %w", *from, BackupFile, err)
		}
		var doc backupDoc
		if err := json.Unmarshal(b, &doc); err != nil || doc.Device == "" {
			return fmt.Errorf("restore: %s is corrupt", filepath.Join(*from, BackupFile))
		}
		if device.Initialized(*data) {
			return fmt.Errorf("restore: %s is already a device's data dir: give a new one (a backup never goes back into a data dir)", *data)
		}
		k, err := c.keysFrom(*from, doc.Chain)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		k.Founder = false // it joins; it never bootstraps
		dev, err := device.Create(*data, k)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if err := node.WriteReplaces(*data, doc.Device); err != nil {
			_ = os.RemoveAll(*data)
			return fmt.Errorf("restore: %w", err)
		}
		fmt.Fprintf(c.stdout, "restored the keys of %s into %s as a new device %s\n", shortPeer(doc.Device), *data, dev.ID)
		fmt.Fprintf(c.stdout, "next: baton invite on a running member, then here:\n  baton join --data %s --invite-file invite.txt\n", *data)
		fmt.Fprintf(c.stdout, "once joined, it removes %s from the cluster; its state re-syncs from the others\n", shortPeer(doc.Device))
		return nil
	}
	return cmd
}
