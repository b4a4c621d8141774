package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

const initUsage = `Usage: baton init [--data DIR] --new-chain
       baton init [--data DIR] --from INVITE|FILE|DIR [--chain DID]

Creates this device's data dir (mode 0700) and its keys:

  identity.key  this device's libp2p key (its peer ID)
  network.key   the private network key every device shares
  chain.key     the chain key (the identity baton protects); absent on a replica
  device.json   the chain this device serves

--new-chain makes a new chain key and network key: do this once, on the first device.
--from takes the network key (and the chain key, if present) from:
  an invite token (baton1...) printed by ` + "`baton invite`" + ` on a running device,
  a file holding such a token,
  another device's data dir (or a backup of it) holding network.key and chain.key,
  or a network key file (the chain key is then read from chain.key beside it, else
  --chain DID names the chain and this device verifies but never signs).
Existing keys are never overwritten.

Examples:
  baton init --data ~/.baton --new-chain
  baton init --data /tmp/b2 --from "$(cat invite.txt)"
  baton init --data /tmp/b2 --from /tmp/b1
`

func cmdInit(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("init", initUsage)
	data := dataFlag(fs)
	newChain := fs.Bool("new-chain", false, "create a new chain key and network key (first device only)")
	from := fs.String("from", "", "take the keys from an invite token, an invite file, a data dir or a network key file")
	chainDID := fs.String("chain", "", "the chain's did:key, when --from gives only a network key")
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	if *newChain == (*from != "") {
		return usagef("give exactly one of --new-chain or --from")
	}
	if *chainDID != "" && *newChain {
		return usagef("--chain goes with --from, not --new-chain")
	}
	var k keys
	var inv *invite
	if *newChain {
		key, err := chain.GenerateKey(nil)
		if err != nil {
			return err
		}
		psk, err := transport.GeneratePSK()
		if err != nil {
			return err
		}
		k = keys{psk: psk, chain: key.DID(), key: key, first: true}
	} else {
		var err error
		k, inv, err = keysFrom(*from, *chainDID)
		if err != nil {
			return err
		}
	}
	id, err := writeDevice(*data, k)
	if err != nil {
		return err
	}
	w := c.stdout
	fmt.Fprintf(w, "initialized %s\n", *data)
	fmt.Fprintf(w, "  device (peer ID): %s\n", id)
	fmt.Fprintf(w, "  chain:            %s\n", k.chain)
	if k.key == nil {
		fmt.Fprintf(w, "  chain key:        none (this device verifies and replicates but never signs)\n")
	}
	fmt.Fprintln(w, "next:")
	switch {
	case k.first:
		fmt.Fprintf(w, "  baton run --data %s --listen /ip4/0.0.0.0/tcp/7420     # bootstraps the cluster on its first run\n", *data)
		fmt.Fprintf(w, "  baton invite --data %s --with-chain-key                # in another terminal: an invite for the next device\n", *data)
	case inv != nil:
		if inv.expired(time.Now()) {
			fmt.Fprintf(w, "  (the invite expired at %s: ask for a new one for `baton join`)\n", inv.exp.Format(time.RFC3339))
		}
		fmt.Fprintf(w, "  baton join --data %s --listen /ip4/0.0.0.0/tcp/7420 INVITE\n", *data)
	default:
		fmt.Fprintf(w, "  baton join --data %s --listen /ip4/0.0.0.0/tcp/7420 INVITE   # INVITE from `baton invite` on a running device\n", *data)
	}
	return nil
}

// keysFrom reads keys from an invite token, an invite file, a data dir or a network
// key file.
func keysFrom(from, chain string) (keys, *invite, error) {
	if looksLikeInvite(from) {
		return keysFromInvite(from, chain)
	}
	st, err := os.Stat(from)
	if err != nil {
		return keys{}, nil, fmt.Errorf("--from %s: neither an invite (baton1...) nor a readable file or dir: %w", from, err)
	}
	if st.IsDir() {
		return keysFromDir(from, chain)
	}
	b, err := readSmall(from, maxInviteLen)
	if err != nil {
		return keys{}, nil, fmt.Errorf("--from: %w", err)
	}
	if looksLikeInvite(string(b)) {
		return keysFromInvite(string(b), chain)
	}
	psk, err := transport.ReadPSKFile(from)
	if err != nil {
		return keys{}, nil, fmt.Errorf("--from %s: not an invite and not a network key file: %w", from, err)
	}
	k, err := chainBeside(filepath.Dir(from), chain)
	if err != nil {
		return keys{}, nil, err
	}
	k.psk = psk
	return k, nil, nil
}

func keysFromInvite(s, chain string) (keys, *invite, error) {
	inv, err := decodeInvite(s)
	if err != nil {
		return keys{}, nil, err
	}
	if chain != "" && chain != inv.chain {
		return keys{}, nil, fmt.Errorf("--chain %s, but the invite is for %s", chain, inv.chain)
	}
	return keys{psk: inv.psk, chain: inv.chain, key: inv.key}, inv, nil
}

func keysFromDir(dir, chain string) (keys, *invite, error) {
	psk, err := transport.ReadPSKFile(filepath.Join(dir, networkKeyFile))
	if err != nil {
		return keys{}, nil, fmt.Errorf("--from %s: %w", dir, err)
	}
	k, err := chainBeside(dir, chain)
	if err != nil {
		return keys{}, nil, err
	}
	k.psk = psk
	return k, nil, nil
}

// chainBeside finds the chain key (chain.key) or at least the chain (device.json, or
// --chain) in dir.
func chainBeside(dir, did string) (keys, error) {
	key, err := chain.LoadKey(filepath.Join(dir, chainKeyFile))
	switch {
	case err == nil:
		if did != "" && did != key.DID() {
			return keys{}, fmt.Errorf("--chain %s, but %s holds the key of %s", did, filepath.Join(dir, chainKeyFile), key.DID())
		}
		return keys{chain: key.DID(), key: key}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return keys{}, err
	}
	if did == "" {
		if raw, err := readSmall(filepath.Join(dir, deviceFile), 4096); err == nil {
			var doc deviceDoc
			if json.Unmarshal(raw, &doc) == nil {
				did = doc.Chain
			}
		}
	}
	if did == "" {
		return keys{}, fmt.Errorf("no %s in %s: give the chain's did:key with --chain (this device will then verify but never sign)", chainKeyFile, dir)
	}
	if _, err := chain.ParseDID(did); err != nil {
		return keys{}, usagef("--chain: %v", err)
	}
	return keys{chain: did}, nil
}

// chainKeySeed reads the seed of a chain key file (format of chain.SaveKey), after
// chain.LoadKey has validated it.
func chainKeySeed(path string) ([]byte, error) {
	k, err := chain.LoadKey(path)
	if err != nil {
		return nil, err
	}
	raw, err := readSmall(path, 4096)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Seed string `json:"seed"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(doc.Seed))
	if err != nil {
		return nil, err
	}
	if again, err := chain.NewEd25519KeyFromSeed(seed); err != nil || again.DID() != k.DID() {
		return nil, fmt.Errorf("%s: seed does not match its did", path)
	}
	return seed, nil
}
