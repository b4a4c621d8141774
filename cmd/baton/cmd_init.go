package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/chain/atproto/migrate"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/transport"
)

const initLong = `Creates this device's data dir (mode 0700) and its keys:

  identity.key  this device's libp2p key (its peer ID)
  network.key   the private network key every device shares
  chain.key     the chain key (the identity baton protects); absent on a replica
  device.json   the chain this device serves

--new-chain makes a new chain key and network key: do this once, on the first device.
--format atproto makes the chain an atproto repository: a P-256 chain key (did:key
zDn...; --key-type k256 for a K-256 one, zQ3s...), commits in atproto's commit v3
over a Merkle Search Tree, records DAG-CBOR (see ` + "`baton export --car`" + `). The format
is fixed by the chain's genesis.
--import-key FILE takes the chain key of an atproto chain from an existing account
instead of making one: its #atproto signing key as a multibase private key (z...,
goat's form), 64 hex characters (a PDS's *_PRIVATE_KEY_HEX setting), the 32 raw bytes
of the reference PDS's per-account key file (K-256), or one NAME=VALUE line of an env
file; hex and raw bytes need --key-type (k256 for the reference PDS) unless the NAME
says K256 or P256.
--did DID names the repository with a did:plc the account already has (default: the
chain key's did:key). The genesis records it and every commit carries it. baton does
not resolve the DID: make sure its DID document's #atproto key is the chain key (the
did:key init prints; a PLC operation signed with one of the identity's rotation keys
changes it). --did-doc FILE checks a DID document you fetched (for a did:plc,
https://plc.directory/DID) before anything is written: its #atproto key must be the
chain key.
--from takes the network key (and the chain key, if present) from:
  a file holding an invite printed by ` + "`baton invite`" + ` on a running device (or - for stdin),
  another device's data dir (or a backup of it) holding network.key and chain.key,
  or a network key file (the chain key is then read from chain.key beside it, else
  --chain DID names the chain and this device verifies but never signs).
An expired invite is refused before anything is written. Existing keys are never
overwritten. Most new devices skip init: ` + "`baton join --invite-file F`" + ` initializes too.`

const initExample = `  baton init --data ~/.baton --new-chain
  baton init --data ~/.baton --new-chain --format atproto
  baton init --data ~/.baton --new-chain --format atproto --import-key signing.key --key-type k256 --did did:plc:ewvi7nxzyoun6zhxrhs64oiz
  baton init --data /tmp/b2 --from invite.txt
  baton init --data /tmp/b2 --from - < invite.txt
  baton init --data /tmp/b2 --from /tmp/b1`

func (c *cli) initCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "init (--new-chain | --from INVITE-FILE|-|DIR|KEY-FILE) [--data DIR]",
		Short:   "create this device's keys in a data dir (a new chain, or from an invite)",
		Long:    initLong,
		Example: initExample,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	data := dataFlag(fs)
	newChain := fs.Bool("new-chain", false, "create a new chain key and network key (first device only)")
	from := fs.String("from", "", "take the keys from an invite `file` (- for stdin), a data dir or a network key file")
	chainDID := fs.String("chain", "", "the chain's did:key, when --from gives only a network key")
	format := fs.String("format", "baton", "with --new-chain: the commit `format`, baton or atproto (an atproto repository signed with a P-256 or K-256 key)")
	keyType := fs.String("key-type", "", "with --format atproto: the chain key's curve, p256 (default for a new key) or k256; for --import-key, the curve of a hex or raw key")
	importKey := fs.String("import-key", "", "with --format atproto: take the chain key (the account's #atproto signing key) from `file` (- for stdin) instead of making one")
	repoDID := fs.String("did", "", "with --format atproto: the repository's `did:plc` (default: the chain key's did:key); not resolved")
	didDoc := fs.String("did-doc", "", "with --did: check the DID document in `file` (fetched by you) names the chain key as #atproto")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *newChain == (*from != "") {
			return usagef("give exactly one of --new-chain or --from")
		}
		if *chainDID != "" && *newChain {
			return usagef("--chain goes with --from, not --new-chain")
		}
		if fs.Changed("format") && !*newChain {
			return usagef("--format goes with --new-chain (a joining device takes the chain's)")
		}
		atprotoFlags := *keyType != "" || *importKey != "" || *repoDID != ""
		if atprotoFlags && (!*newChain || *format != "atproto") {
			return usagef("--key-type, --import-key and --did go with --new-chain --format atproto")
		}
		if *didDoc != "" && *repoDID == "" {
			return usagef("--did-doc goes with --did")
		}
		var k device.Keys
		if *newChain && atprotoFlags {
			var err error
			if k, err = c.atprotoKeys(*keyType, *importKey, *repoDID); err != nil {
				return err
			}
			if *didDoc != "" {
				b, err := device.ReadSmall(*didDoc, 64<<10)
				if err != nil {
					return usagef("--did-doc: %v", err)
				}
				if err := migrate.CheckDIDDocument(b, *repoDID, k.Chain); err != nil {
					return fmt.Errorf("--did-doc %s: %w", *didDoc, err)
				}
			}
		} else if *newChain {
			var err error
			if k, err = device.NewChainKeysFormat(*format); err != nil {
				return err
			}
		} else {
			var err error
			if k, err = c.keysFrom(*from, *chainDID); err != nil {
				return err
			}
		}
		d, err := device.Create(*data, k)
		if err != nil {
			return err
		}
		w := c.stdout
		fmt.Fprintf(w, "initialized %s\n", *data)
		fmt.Fprintf(w, "  device (peer ID): %s\n", d.ID)
		fmt.Fprintf(w, "  chain:            %s\n", d.Chain)
		if d.AnyKey == nil {
			fmt.Fprintf(w, "  chain key:        none (this device verifies and replicates but never signs)\n")
		}
		if d.Repo != "" {
			fmt.Fprintf(w, "  repository:       %s\n", d.Repo)
			if *didDoc != "" {
				fmt.Fprintf(w, "  DID document:     %s names %s as #atproto (checked offline: keep it so at the PLC directory)\n", *didDoc, d.Chain)
			} else {
				fmt.Fprintf(w, "note: baton does not resolve %s: its DID document's #atproto key must be %s, or atproto's software refuses every commit\n", d.Repo, d.Chain)
			}
		}
		fmt.Fprintln(w, "next:")
		if d.Founder {
			fmt.Fprintf(w, "  baton run --data %s                          # bootstraps the cluster on its first run\n", *data)
			fmt.Fprintf(w, "  baton invite --data %s --with-chain-key > invite.txt   # in another terminal: an invite for the next device\n", *data)
		} else {
			fmt.Fprintf(w, "  baton join --data %s --invite-file invite.txt   # invite.txt from `baton invite` on a running device\n", *data)
		}
		return nil
	}
	return cmd
}

// atprotoKeys makes the keys of a new atproto chain: a chain key of curve keyType
// made here, or imported from importFile, and the repository DID did (may be "").
func (c *cli) atprotoKeys(keyType, importFile, did string) (device.Keys, error) {
	if keyType != "" && keyType != atproto.KeyTypeP256 && keyType != atproto.KeyTypeK256 {
		return device.Keys{}, usagef("--key-type %q: want %s or %s", keyType, atproto.KeyTypeP256, atproto.KeyTypeK256)
	}
	if did != "" {
		if err := atproto.CheckRepoDID(did); err != nil {
			return device.Keys{}, usagef("--did: %v", err)
		}
	}
	var k *atproto.Key
	var err error
	switch importFile {
	case "":
		if keyType == "" {
			keyType = atproto.KeyTypeP256
		}
		k, err = atproto.GenerateKeyOf(keyType)
	default:
		var b []byte
		if importFile == "-" {
			b, err = io.ReadAll(io.LimitReader(c.stdin, 4096))
		} else {
			b, err = device.ReadSmall(importFile, 4096)
		}
		if err != nil {
			return device.Keys{}, fmt.Errorf("--import-key: %w", err)
		}
		if k, err = atproto.ImportKey(b, keyType); err != nil {
			return device.Keys{}, usagef("--import-key %s: %v", importFile, err)
		}
	}
	if err != nil {
		return device.Keys{}, err
	}
	return device.NewAtprotoChainKeys(k, did)
}

// keysFrom reads keys from an invite file (or stdin), a data dir or a network key
// file. An expired invite is refused here, before anything is written.
func (c *cli) keysFrom(from, did string) (device.Keys, error) {
	if device.LooksLikeInvite(from) {
		inv, err := device.ParseInvite(from)
		if err != nil {
			return device.Keys{}, usagef("--from: %v", err)
		}
		fmt.Fprintln(c.stderr, "warning: an invite in argv is visible to other users of this machine (ps, shell history): use --from FILE or --from - next time")
		return keysFromInvite(inv, did)
	}
	if from == "-" {
		inv, err := device.ReadInvite(c.stdin, "stdin")
		if err != nil {
			return device.Keys{}, err
		}
		return keysFromInvite(inv, did)
	}
	st, err := os.Stat(from)
	if err != nil {
		return device.Keys{}, fmt.Errorf("--from %s: not a readable file or dir: %w", from, err)
	}
	if st.IsDir() {
		psk, err := transport.ReadPSKFile(filepath.Join(from, device.NetworkKeyFile))
		if err != nil {
			return device.Keys{}, fmt.Errorf("--from %s: %w", from, err)
		}
		k, err := chainBeside(from, did)
		k.PSK = psk
		return k, err
	}
	b, err := device.ReadSmall(from, device.MaxInviteLen)
	if err != nil {
		return device.Keys{}, fmt.Errorf("--from: %w", err)
	}
	if device.LooksLikeInvite(string(b)) {
		inv, err := device.ParseInvite(string(b))
		if err != nil {
			return device.Keys{}, err
		}
		return keysFromInvite(inv, did)
	}
	psk, err := transport.ReadPSKFile(from)
	if err != nil {
		return device.Keys{}, fmt.Errorf("--from %s: not an invite and not a network key file: %w", from, err)
	}
	k, err := chainBeside(filepath.Dir(from), did)
	k.PSK = psk
	return k, err
}

func keysFromInvite(inv *device.Invite, did string) (device.Keys, error) {
	if did != "" && did != inv.Chain {
		return device.Keys{}, fmt.Errorf("--chain %s, but the invite is for %s", did, inv.Chain)
	}
	if err := inv.CheckFresh(time.Now()); err != nil {
		return device.Keys{}, err
	}
	return inv.Keys(), nil
}

// chainBeside finds the chain key (chain.key) or at least the chain (device.json, or
// --chain) in dir.
func chainBeside(dir, did string) (device.Keys, error) {
	key, err := chain.LoadAnyKey(filepath.Join(dir, device.ChainKeyFile))
	switch {
	case err == nil:
		if did != "" && did != key.DID() {
			return device.Keys{}, fmt.Errorf("--chain %s, but %s holds the key of %s", did, filepath.Join(dir, device.ChainKeyFile), key.DID())
		}
		// The key's history travels with it: a copy must not bootstrap a second one.
		hist, err := device.ReadHistory(dir, key.DID())
		if err != nil {
			return device.Keys{}, err
		}
		ed, _ := key.(*chain.Ed25519Key)
		return device.Keys{Chain: key.DID(), Key: ed, AnyKey: key, History: hist}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return device.Keys{}, err
	}
	if did == "" {
		if raw, err := device.ReadSmall(filepath.Join(dir, device.DeviceFile), 4096); err == nil {
			var doc device.Doc
			if json.Unmarshal(raw, &doc) == nil {
				did = doc.Chain
			}
		}
	}
	if did == "" {
		return device.Keys{}, fmt.Errorf("no %s in %s: give the chain's did:key with --chain (this device will then verify but never sign)", device.ChainKeyFile, dir)
	}
	if err := signer.CheckChainDID(did); err != nil {
		return device.Keys{}, usagef("--chain: %v", err)
	}
	return device.Keys{Chain: did}, nil
}

// readInviteArg reads an invite from --invite-file (a path, or - for stdin), or, for
// compatibility, from an argument (with a warning: argv is visible to every user).
func (c *cli) readInviteArg(file string, args []string) (*device.Invite, error) {
	switch {
	case file != "" && len(args) > 0:
		return nil, usagef("give the invite with --invite-file or as an argument, not both")
	case file == "-":
		inv, err := device.ReadInvite(c.stdin, "stdin")
		if err != nil {
			return nil, usagef("%v", err)
		}
		return inv, nil
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, usagef("--invite-file: %v", err)
		}
		defer f.Close()
		inv, err := device.ReadInvite(io.Reader(f), file)
		if err != nil {
			return nil, usagef("%v", err)
		}
		return inv, nil
	case len(args) == 1:
		inv, err := device.ParseInvite(args[0])
		if err != nil {
			return nil, usagef("%v", err)
		}
		fmt.Fprintln(c.stderr, "warning: an invite in argv is visible to other users of this machine (ps, shell history): use --invite-file FILE or --invite-file - next time")
		return inv, nil
	}
	return nil, usagef("want the invite: --invite-file FILE, or --invite-file - to read it from stdin")
}
