package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// The chain's identity lives in the replicated state (the genesis entry); a device's
// configuration only has to agree with it. A chain key also remembers which history
// it belongs to: GenesisFile, beside the key, records the genesis hash the first time
// this device sees it applied, so that the same key cannot quietly start a second
// history (bootstrap a new cluster: a second seq 1 for the same did:key).

// GenesisFileName is the default name of Config.GenesisFile in the data dir.
const GenesisFileName = "chain.genesis"

// remembered is the content of a GenesisFile.
type remembered struct {
	Chain   string `json:"chain"`
	Genesis string `json:"genesis"` // hex SHA-256 of the genesis entry
	Index   uint64 `json:"index"`
}

// IdentityError: this device's chain key or its memory of the chain disagrees with
// the cluster's genesis. Start refuses to go on.
type IdentityError struct {
	Msg string
}

func (e *IdentityError) Error() string { return e.Msg }

// Unwrap makes an IdentityError match ErrIdentity.
func (e *IdentityError) Unwrap() error { return ErrIdentity }

func (n *Node) genesisFile() string {
	switch n.cfg.GenesisFile {
	case "-":
		return ""
	case "":
		return filepath.Join(n.cfg.DataDir, GenesisFileName)
	}
	return n.cfg.GenesisFile
}

// readRemembered reads the GenesisFile (ok false when there is none).
func (n *Node) readRemembered() (remembered, bool, error) {
	p := n.genesisFile()
	if p == "" || n.cfg.ChainKey == nil {
		return remembered{}, false, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return remembered{}, false, nil
	}
	if err != nil {
		return remembered{}, false, fmt.Errorf("read %s: %w", p, err)
	}
	r, err := parseRemembered(b)
	if err != nil {
		return remembered{}, false, fmt.Errorf("%s is corrupt: remove it only if you are sure this key has no other history", p)
	}
	return r, true, nil
}

func parseRemembered(b []byte) (remembered, error) {
	var r remembered
	if err := json.Unmarshal(b, &r); err != nil {
		return remembered{}, err
	}
	if _, err := hex.DecodeString(r.Genesis); err != nil || r.Chain == "" || len(r.Genesis) != 64 {
		return remembered{}, errors.New("not a genesis record")
	}
	return r, nil
}

// CheckHistory checks the content of a GenesisFile (the history a chain key belongs
// to) before it travels with the key to another data dir (init --from, an invite):
// it must be one and name chain.
func CheckHistory(b []byte, chain string) error {
	r, err := parseRemembered(b)
	if err != nil {
		return fmt.Errorf("%s: %w", GenesisFileName, err)
	}
	if r.Chain != chain {
		return fmt.Errorf("%s belongs to chain %s, not %s", GenesisFileName, r.Chain, chain)
	}
	return nil
}

// checkIdentity compares this device's configuration and its remembered genesis with
// the genesis in the local state (when there is one). fresh: the log is empty and
// the node is about to bootstrap a new cluster.
func (n *Node) checkIdentity(bootstrapping bool) error {
	rem, has, err := n.readRemembered()
	if err != nil {
		return err
	}
	if has && rem.Chain != n.cfg.Chain {
		return &IdentityError{Msg: fmt.Sprintf("%s belongs to chain %s, but this device's chain key is %s",
			n.genesisFile(), rem.Chain, n.cfg.Chain)}
	}
	if bootstrapping && has && n.cfg.NewHistory {
		// The operator starts a second history: the key will remember the new one;
		// the old record stays beside it, as evidence.
		old := fmt.Sprintf("%s.%s.old", n.genesisFile(), rem.Genesis[:16])
		if err := os.Rename(n.genesisFile(), old); err != nil {
			return fmt.Errorf("set the old history's genesis aside: %w", err)
		}
		n.logger.Warn("starting a second history of this chain (NewHistory): readers of the first will see a fork",
			"chain", rem.Chain, "old_genesis", rem.Genesis, "kept_in", old)
		return nil
	}
	if bootstrapping && has && !n.cfg.NewHistory {
		return &IdentityError{Msg: fmt.Sprintf("the chain key of %s already has a history (genesis %s, index %d, remembered in %s): "+
			"bootstrapping a new cluster with it would start a second history of the same chain, which any reader of the first sees as a fork. "+
			"To add this device to the cluster that holds the history, run `baton invite` on a running member and "+
			"`baton join --data DIR --invite-file FILE` here (a new data dir is fine: the invite carries the keys); "+
			"a member whose Raft log is damaged is re-synced with `baton repair`, not bootstrapped",
			n.cfg.Chain, rem.Genesis[:16], rem.Index, n.genesisFile())}
	}
	return n.checkGenesis(n.log.View())
}

// checkGenesis compares the applied genesis (if any) with this device: its chain, its
// history, and its lease TTL against the genesis's dedupe retention.
func (n *Node) checkGenesis(v intentlog.View) error {
	if v.Chain != "" && v.Chain != n.cfg.Chain {
		return &IdentityError{Msg: fmt.Sprintf("this cluster's chain is %s, but this device is configured for %s: "+
			"its chain key (or --chain) belongs to another chain", v.Chain, n.cfg.Chain)}
	}
	g := v.Genesis
	if g.Index == 0 {
		return nil
	}
	rem, has, err := n.readRemembered()
	if err != nil {
		return err
	}
	if has && rem.Genesis != hex.EncodeToString(g.Hash[:]) {
		return &IdentityError{Msg: fmt.Sprintf("this cluster's history of %s starts at genesis %s, but this device's chain key "+
			"belongs to another history (genesis %s, in %s)", g.Chain, hex.EncodeToString(g.Hash[:8]), rem.Genesis[:16], n.genesisFile())}
	}
	if err := intentlog.CheckLeaseTTL(n.cfg.TTL, time.Duration(g.Retention)*time.Millisecond); err != nil {
		return fmt.Errorf("%w: this chain's genesis: %w", ErrBadConfig, err)
	}
	return nil
}

// remember writes the GenesisFile once the genesis is applied (a device with the
// chain key that has none yet).
func (n *Node) remember(g intentlog.Genesis) error {
	p := n.genesisFile()
	if p == "" || n.cfg.ChainKey == nil {
		return nil
	}
	if _, has, err := n.readRemembered(); err != nil || has {
		return err
	}
	b, _ := json.Marshal(remembered{Chain: g.Chain, Genesis: hex.EncodeToString(g.Hash[:]), Index: g.Index})
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("remember the genesis: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("remember the genesis: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("remember the genesis: %w", err)
	}
	return nil
}

func syncFile(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// keepGenesis runs until the genesis is applied: it proposes one when this device is
// the one to write it (it bootstrapped the cluster, or the log is a legacy chain
// without one and this device has its key), then checks it and remembers it. A
// genesis that disagrees with this device stops it (fail).
func (n *Node) keepGenesis(bootstrapped bool, fail func(error)) {
	proposed := false
	for {
		w := n.log.Watch()
		v := n.log.View()
		if v.Genesis.Index != 0 {
			if err := n.checkGenesis(v); err != nil {
				fail(err)
				return
			}
			if err := n.remember(v.Genesis); err != nil {
				n.logger.Error("could not remember the chain's genesis beside the chain key", "err", err)
			}
			return
		}
		legacy := v.Head.Seq > 0 && v.Chain == n.cfg.Chain
		if n.cfg.ChainKey != nil && (bootstrapped || legacy) && !proposed && n.lease != nil {
			if err := n.proposeGenesis(); err != nil {
				n.logger.Debug("genesis not proposed yet", "err", err)
			} else {
				proposed = true
			}
		}
		t := time.NewTimer(n.cfg.Tick)
		select {
		case <-w:
		case <-t.C:
			proposed = false // not applied after a tick: propose again (a second is refused)
		case <-n.ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

func (n *Node) proposeGenesis() error {
	nonce := make([]byte, intentlog.GenesisNonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Tick)
	defer cancel()
	res, err := n.prop.Propose(ctx, intentlog.GenesisEntry{Chain: n.cfg.Chain, Version: genesisVersion(n.cfg.Chain),
		Nonce: nonce, TS: n.cfg.Clock.Now().UnixMilli(), Retention: n.cfg.Retention.Milliseconds(), MaxIDs: n.cfg.MaxIDs,
		Repo: n.cfg.RepoDID})
	if err != nil {
		return err
	}
	if !res.Accepted && res.Reason != intentlog.ReasonGenesisExists {
		return fmt.Errorf("genesis refused: %s", res.Reason)
	}
	return nil
}

// checkJoined runs after a join: once this replica has caught up with the leader it
// compares the cluster's genesis with this device. A device joined with another
// chain's key is refused here (and leaves again) instead of diverging silently.
func (n *Node) checkJoined(ctx context.Context) error {
	if err := n.prop.Sync(ctx); err != nil {
		n.logger.Warn("could not catch up after joining to check the chain's identity", "err", err)
		return nil // the loop does not sign under a genesis that is not ours anyway
	}
	return n.checkGenesis(n.log.View())
}
