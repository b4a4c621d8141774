package device

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

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// Files of a device's data dir written by Create (the node adds identity.key if
// missing, members.json, raft.db, state.db, snapshots/ and chain.genesis).
const (
	NetworkKeyFile = "network.key"  // the private network key (swarm key format), 0600
	ChainKeyFile   = "chain.key"    // the chain key (chain.SaveKey format), 0600; absent on a replica
	DeviceFile     = "device.json"  // which chain this device serves; whether it founded the cluster
	IdentityFile   = "identity.key" // this device's libp2p key (transport.LoadOrCreateIdentity)
	RemovedFile    = "removed.json" // written when the device left or was removed (MarkRemoved)
)

// Doc is device.json.
type Doc struct {
	Version int    `json:"version"`
	Chain   string `json:"chain"`           // the chain's did:key
	First   bool   `json:"first,omitempty"` // created with a new chain: bootstraps on its first run
	// Signer: created with the chain key (true) or as a replica (false). Absent in a
	// device.json written before it was recorded (see Open).
	Signer *bool `json:"signer,omitempty"`
	// Repo: on an atproto chain, the repository DID (a did:plc) the genesis names when
	// this device, the founder, writes it. Absent: the chain key's did:key.
	Repo string `json:"repo,omitempty"`
}

// Device is an opened data dir.
type Device struct {
	Dir     string
	ID      peer.ID           // this device's peer ID (from identity.key)
	PSK     pnet.PSK          // the network key
	Chain   string            // the chain's did:key
	Key     *chain.Ed25519Key // the chain key; nil on a replica that never signs
	Founder bool              // made with a new chain: bootstraps the cluster on its first run
	// Replica: made without the chain key (or by a version that did not record it, and
	// not the founder): it never signs. baton run says so at start.
	Replica bool
	// AnyKey is the chain key whatever its type (Key is the same key when it is
	// Ed25519; a P-256 or K-256 key of an atproto chain is only here).
	AnyKey chain.Key
	// Repo is the repository DID the founder's genesis names (Doc.Repo); "" otherwise.
	Repo string
}

// Keys is what Create writes besides the identity.
type Keys struct {
	PSK     pnet.PSK
	Chain   string
	Key     *chain.Ed25519Key // optional
	Founder bool
	// History is the chain key's history marker (node.GenesisFileName: which genesis
	// the key belongs to), written beside the key. It travels wherever the key does
	// (init --from a data dir or a backup, an invite with the key), so that the copy
	// can not bootstrap a second history of the chain.
	History []byte
	// AnyKey: optional, a chain key of another type (P-256 or K-256: an atproto
	// chain); Key nil.
	AnyKey chain.Key
	// Repo: optional, on a new atproto chain (Founder), the repository DID its genesis
	// names (a did:plc the user has; signer.CheckRepoDID). Not resolved.
	Repo string
}

// ReadHistory reads the history marker beside a chain key in dir (nil when there is
// none) and checks it belongs to chain.
func ReadHistory(dir, chain string) ([]byte, error) {
	b, err := ReadSmall(filepath.Join(dir, node.GenesisFileName), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := node.CheckHistory(b, chain); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return b, nil
}

// NewChainKeys makes the keys of a new chain: a chain key and a network key.
func NewChainKeys() (Keys, error) {
	key, err := chain.GenerateKey(nil)
	if err != nil {
		return Keys{}, err
	}
	psk, err := transport.GeneratePSK()
	if err != nil {
		return Keys{}, err
	}
	return Keys{PSK: psk, Chain: key.DID(), Key: key, Founder: true}, nil
}

// Open reads the keys Create wrote. Every problem names the file and what to do;
// an uninitialized dir is ErrNotInitialized.
func Open(dir string) (*Device, error) {
	raw, err := os.ReadFile(filepath.Join(dir, DeviceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is %w: run `baton init --data %s --new-chain` on the first device, or `baton join --data %s --invite-file FILE` on the others", dir, ErrNotInitialized, dir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", DeviceFile, err)
	}
	var doc Doc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: corrupt (%v)", filepath.Join(dir, DeviceFile), err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", filepath.Join(dir, DeviceFile), doc.Version)
	}
	if err := signer.CheckChainDID(doc.Chain); err != nil {
		return nil, fmt.Errorf("%s: chain: %w", filepath.Join(dir, DeviceFile), err)
	}
	if doc.Repo != "" {
		if err := signer.CheckRepoDID(doc.Chain, doc.Repo); err != nil {
			return nil, fmt.Errorf("%s: repo: %w", filepath.Join(dir, DeviceFile), err)
		}
	}
	d := &Device{Dir: dir, Chain: doc.Chain, Founder: doc.First, Repo: doc.Repo}
	if d.PSK, err = transport.ReadPSKFile(filepath.Join(dir, NetworkKeyFile)); err != nil {
		return nil, fmt.Errorf("network key: %w", err)
	}
	k, err := chain.LoadAnyKey(filepath.Join(dir, ChainKeyFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := checkNoChainKey(dir, doc); err != nil {
			return nil, err
		}
		d.Replica = true
	case err != nil:
		return nil, err
	case k.DID() != doc.Chain:
		return nil, fmt.Errorf("%w: %s holds the key of %s, but this device serves %s", ErrWrongChain, filepath.Join(dir, ChainKeyFile), k.DID(), doc.Chain)
	default:
		d.AnyKey = k
		d.Key, _ = k.(*chain.Ed25519Key)
	}
	if err := checkIdentityPresent(dir); err != nil {
		return nil, err
	}
	priv, err := transport.LoadOrCreateIdentity(dir)
	if err != nil {
		return nil, err
	}
	if d.ID, err = peer.IDFromPrivateKey(priv); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return d, nil
}

// Initialized reports whether dir holds a device (its device.json exists).
func Initialized(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, DeviceFile))
	return err == nil
}

// Create makes dir (mode 0700) and writes the keys, refusing to overwrite any of them
// (ErrExists). It creates identity.key when missing and returns the opened device.
// A failure removes the files Create wrote.
func Create(dir string, k Keys) (_ *Device, err error) {
	if k.Chain == "" && k.Key != nil {
		k.Chain = k.Key.DID()
	}
	if k.Chain == "" && k.AnyKey != nil {
		k.Chain = k.AnyKey.DID()
	}
	if err := signer.CheckChainDID(k.Chain); err != nil {
		return nil, fmt.Errorf("chain: %w", err)
	}
	if k.Key != nil && k.Key.DID() != k.Chain {
		return nil, fmt.Errorf("%w: the chain key is for %s, not %s", ErrWrongChain, k.Key.DID(), k.Chain)
	}
	if k.AnyKey != nil && k.AnyKey.DID() != k.Chain {
		return nil, fmt.Errorf("%w: the chain key is for %s, not %s", ErrWrongChain, k.AnyKey.DID(), k.Chain)
	}
	if len(k.PSK) != transport.PSKSize {
		return nil, fmt.Errorf("network key: want %d bytes, got %d", transport.PSKSize, len(k.PSK))
	}
	if k.Repo != "" && !k.Founder {
		return nil, fmt.Errorf("a repository DID is named by the genesis, which only a new chain's first device writes")
	}
	if k.Repo != "" {
		if err := signer.CheckRepoDID(k.Chain, k.Repo); err != nil {
			return nil, fmt.Errorf("repository DID: %w", err)
		}
	}
	for _, f := range []string{DeviceFile, NetworkKeyFile, ChainKeyFile, node.GenesisFileName} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return nil, fmt.Errorf("%s: %w (keys are never overwritten; use another data dir)", filepath.Join(dir, f), ErrExists)
		}
	}
	undo, err := Begin(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = undo.Undo()
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if _, err := transport.LoadOrCreateIdentity(dir); err != nil {
		return nil, err
	}
	if k.Key != nil {
		if err := chain.SaveKey(filepath.Join(dir, ChainKeyFile), k.Key); err != nil {
			return nil, err
		}
	} else if k.AnyKey != nil {
		if err := saveOtherKey(filepath.Join(dir, ChainKeyFile), k.AnyKey); err != nil {
			return nil, err
		}
	}
	if k.History != nil && (k.Key != nil || k.AnyKey != nil) {
		if err := node.CheckHistory(k.History, k.Chain); err != nil {
			return nil, err
		}
		if err := writeFileExcl(filepath.Join(dir, node.GenesisFileName), k.History, 0o600); err != nil {
			return nil, err
		}
	}
	if err := transport.WritePSKFile(filepath.Join(dir, NetworkKeyFile), k.PSK); err != nil {
		return nil, fmt.Errorf("write network key: %w", err)
	}
	signer := k.Key != nil || k.AnyKey != nil
	doc, err := json.MarshalIndent(Doc{Version: 1, Chain: k.Chain, First: k.Founder, Signer: &signer, Repo: k.Repo}, "", "  ")
	if err != nil {
		return nil, err
	}
	// device.json last: its presence means the dir is complete.
	if err := writeFileExcl(filepath.Join(dir, DeviceFile), append(doc, '\n'), 0o600); err != nil {
		return nil, err
	}
	return Open(dir)
}

// ChainKeySeed returns the type and seed (the private key's bytes) of the device's
// chain key (what an invite with the chain key carries), read back from chain.key and
// checked against its did.
func (d *Device) ChainKeySeed() (typ string, seed []byte, err error) {
	if d.AnyKey == nil {
		return "", nil, fmt.Errorf("%s has no chain key (a replica)", d.Dir)
	}
	path := filepath.Join(d.Dir, ChainKeyFile)
	k, typ, seed, err := chain.ReadKeyFileSeed(path)
	if err != nil {
		return "", nil, err
	}
	if k.DID() != d.AnyKey.DID() {
		return "", nil, fmt.Errorf("%s: the key is %s, the device's %s", path, k.DID(), d.AnyKey.DID())
	}
	return typ, seed, nil
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

// ReadSmall reads at most max bytes of a file, refusing larger ones: inputs such as
// invite files must not be able to exhaust memory.
func ReadSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path, max)
}

func readLimited(r io.Reader, name string, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, max)
	}
	return b, nil
}

// Attempt records what a data dir held before an operation that may fail half-way
// (a join), so that Undo removes exactly what was added since.
type Attempt struct {
	dir     string
	existed bool
	before  map[string]bool
}

// Begin records dir's entries (dir need not exist).
func Begin(dir string) (*Attempt, error) {
	a := &Attempt{dir: dir, before: map[string]bool{}}
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a, nil
	case err != nil:
		return nil, err
	}
	a.existed = true
	for _, e := range ents {
		a.before[e.Name()] = true
	}
	return a, nil
}

// Undo removes the entries added to the dir since Begin (and the dir itself when
// Begin found none and it is empty again). It returns what it removed.
func (a *Attempt) Undo() error {
	ents, err := os.ReadDir(a.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if a.before[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(a.dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if !a.existed {
		if err := os.Remove(a.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
