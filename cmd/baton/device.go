package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// Files of a device's data dir written by `baton init` (the node adds identity.key,
// members.json, raft.db, state.db, snapshots/ and baton.sock).
const (
	networkKeyFile = "network.key" // the private network key (swarm key format), 0600
	chainKeyFile   = "chain.key"   // the chain key (chain.SaveKey format), 0600; absent on a replica that never signs
	deviceFile     = "device.json" // which chain this device serves and whether it founded the cluster
	socketFile     = "baton.sock"  // the local API
)

// deviceDoc is device.json.
type deviceDoc struct {
	Version int    `json:"version"`
	Chain   string `json:"chain"`           // the chain's did:key
	First   bool   `json:"first,omitempty"` // created with --new-chain: bootstraps on its first run
}

// device is a loaded data dir.
type device struct {
	dir   string
	id    peer.ID
	psk   pnet.PSK
	chain string
	key   *chain.Ed25519Key // nil on a replica without the chain key
	first bool
}

// loadDevice reads the keys `baton init` wrote. Every problem names the file and what
// to do.
func loadDevice(dir string) (*device, error) {
	raw, err := os.ReadFile(filepath.Join(dir, deviceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is %w: run `baton init --data %s --new-chain` on the first device, or `baton init --data %s --from INVITE` on the others", dir, errNotInitialized, dir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", deviceFile, err)
	}
	var doc deviceDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: corrupt (%v)", filepath.Join(dir, deviceFile), err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", filepath.Join(dir, deviceFile), doc.Version)
	}
	if _, err := chain.ParseDID(doc.Chain); err != nil {
		return nil, fmt.Errorf("%s: chain: %w", filepath.Join(dir, deviceFile), err)
	}
	d := &device{dir: dir, chain: doc.Chain, first: doc.First}
	if d.psk, err = transport.ReadPSKFile(filepath.Join(dir, networkKeyFile)); err != nil {
		return nil, fmt.Errorf("network key: %w", err)
	}
	k, err := chain.LoadKey(filepath.Join(dir, chainKeyFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case k.DID() != doc.Chain:
		return nil, fmt.Errorf("%s holds the key of %s, but this device serves %s", filepath.Join(dir, chainKeyFile), k.DID(), doc.Chain)
	default:
		d.key = k
	}
	priv, err := transport.LoadOrCreateIdentity(dir)
	if err != nil {
		return nil, err
	}
	if d.id, err = peer.IDFromPrivateKey(priv); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return d, nil
}

// keys is what `baton init` writes besides the identity.
type keys struct {
	psk   pnet.PSK
	chain string
	key   *chain.Ed25519Key // optional
	first bool
}

// writeDevice creates dir (0700) and writes the keys, refusing to overwrite any of them.
// It returns the device's peer ID (creating identity.key if needed).
func writeDevice(dir string, k keys) (peer.ID, error) {
	for _, f := range []string{deviceFile, networkKeyFile, chainKeyFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return "", fmt.Errorf("%s already exists: %s is already initialized (keys are never overwritten; use another --data dir)", filepath.Join(dir, f), dir)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	priv, err := transport.LoadOrCreateIdentity(dir)
	if err != nil {
		return "", err
	}
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	if k.key != nil {
		if err := chain.SaveKey(filepath.Join(dir, chainKeyFile), k.key); err != nil {
			return "", err
		}
	}
	if err := transport.WritePSKFile(filepath.Join(dir, networkKeyFile), k.psk); err != nil {
		return "", fmt.Errorf("write network key: %w", err)
	}
	doc, err := json.MarshalIndent(deviceDoc{Version: 1, Chain: k.chain, First: k.first}, "", "  ")
	if err != nil {
		return "", err
	}
	// device.json last: its presence means the dir is complete.
	if err := writeFileExcl(filepath.Join(dir, deviceFile), append(doc, '\n'), 0o600); err != nil {
		return "", err
	}
	return id, nil
}

func writeFileExcl(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readSmall reads at most max bytes of a file (refusing larger ones): inputs such as
// invite files must not be able to exhaust memory.
func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, nil
}
