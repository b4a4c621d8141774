package device

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

// Config returns the node.Config of the device: DataDir, PSK, Chain, ChainKey (none
// on a replica), and Bootstrap and RepoDID for the device that founded the chain (a
// no-op once Raft state exists). Set the rest (ListenAddrs, TTL, Tick, Logger, ...) before
// node.Start.
func (d *Device) Config() node.Config {
	cfg := node.Config{DataDir: d.Dir, PSK: d.PSK, Chain: d.Chain, Bootstrap: d.Founder, RepoDID: d.Repo}
	if d.AnyKey != nil {
		cfg.ChainKey = d.AnyKey // never a nil *Ed25519Key in the interface
	}
	return cfg
}

// HasState reports whether the device has Raft state (it bootstrapped or joined).
func (d *Device) HasState() (bool, error) { return intentlog.HasState(d.Dir) }

// JoinOptions adjust Join.
type JoinOptions struct {
	// NonVoter joins as a non-voter (a replica that does not count for quorum).
	NonVoter bool
	// Adjust, if set, changes the node.Config before the start (ListenAddrs, TTL,
	// Tick, Logger, ...).
	Adjust func(*node.Config)
}

// PrepareJoin makes dir ready to join with inv: it initializes dir from the invite
// when it holds no device yet (Create), or checks that the invite is for the device's
// chain and network. On a device without Raft state it refuses an expired invite
// before writing anything, and returns a config that joins through the invite's
// addresses; on one that has state (it joined before) the invite is not needed and
// the config just restarts it. Call Attempt.Undo if the start fails: it removes what
// PrepareJoin and the start wrote, so a refused or expired invite leaves no keys
// behind.
func PrepareJoin(dir string, inv *Invite, nonvoter bool, now time.Time) (*Device, node.Config, *Attempt, error) {
	att, err := Begin(dir)
	if err != nil {
		return nil, node.Config{}, nil, err
	}
	var d *Device
	if Initialized(dir) {
		if d, err = Open(dir); err != nil {
			return nil, node.Config{}, nil, err
		}
		if err := inv.Matches(d); err != nil {
			return nil, node.Config{}, nil, err
		}
	} else {
		if err := inv.CheckFresh(now); err != nil {
			return nil, node.Config{}, nil, err
		}
		if d, err = Create(dir, inv.Keys()); err != nil {
			_ = att.Undo()
			return nil, node.Config{}, nil, err
		}
	}
	has, err := d.HasState()
	if err != nil {
		_ = att.Undo()
		return nil, node.Config{}, nil, err
	}
	cfg := d.Config()
	if !has {
		if d.Founder {
			_ = att.Undo()
			return nil, node.Config{}, nil, fmt.Errorf("%s founded its chain (a new chain); it bootstraps and cannot join another cluster", dir)
		}
		if err := inv.CheckFresh(now); err != nil {
			_ = att.Undo()
			return nil, node.Config{}, nil, err
		}
		cfg.Bootstrap = false
		cfg.Join = inv.JoinConfig(nonvoter)
	}
	return d, cfg, att, nil
}

// Join initializes dir from inv if needed and starts the node, joining the invite's
// cluster on the first start. If the start fails, everything it wrote in dir is
// removed again. ctx bounds the start (the join waits for the cluster's leader).
func Join(ctx context.Context, dir string, inv *Invite, opts JoinOptions) (*node.Node, error) {
	_, cfg, att, err := PrepareJoin(dir, inv, opts.NonVoter, time.Now())
	if err != nil {
		return nil, err
	}
	if opts.Adjust != nil {
		opts.Adjust(&cfg)
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		_ = att.Undo()
		return nil, err
	}
	return n, nil
}

// Removal is what removed.json records: when and how the device left its cluster.
type Removal struct {
	At  time.Time `json:"at"`
	How string    `json:"how"` // "left" (baton leave) or "removed" (by another member)
}

// MarkRemoved records in dir that the device left or was removed from its cluster.
func MarkRemoved(dir string, r Removal) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, RemovedFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, RemovedFile))
}

// ReadRemoved returns the removal recorded in dir, if any.
func ReadRemoved(dir string) (Removal, bool, error) {
	b, err := ReadSmall(filepath.Join(dir, RemovedFile), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return Removal{}, false, nil
	}
	if err != nil {
		return Removal{}, false, err
	}
	var r Removal
	if err := json.Unmarshal(b, &r); err != nil {
		return Removal{}, true, fmt.Errorf("%s: %w", filepath.Join(dir, RemovedFile), err)
	}
	return r, true, nil
}

// RemovedError explains a removal recorded in dir; it matches ErrRemoved.
func RemovedError(dir string, r Removal) error { return &removedError{dir: dir, r: r} }

type removedError struct {
	dir string
	r   Removal
}

func (e *removedError) Error() string {
	how := "was removed from its cluster by another member"
	if e.r.How == "left" {
		how = "left its cluster (baton leave)"
	}
	return fmt.Sprintf("the device in %s %s at %s and no longer replicates; to take part again, join with a new data dir (`baton join --data NEWDIR --invite-file FILE`)",
		e.dir, how, e.r.At.Format(time.RFC3339))
}

func (e *removedError) Is(target error) bool { return target == ErrRemoved }
