package device

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/node"
)

const testPLC = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"

// TestCreateAtprotoRepo: a new atproto chain with a K-256 key and a did:plc keeps the
// key (type k256) and the repository DID in device.json, and the node's config names
// it for the genesis; a malformed did:plc, a repository DID on a baton chain or on a
// device that does not found the chain are refused before anything is written, and a
// device.json whose repo was edited into a malformed one does not open.
func TestCreateAtprotoRepo(t *testing.T) {
	k, err := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := NewAtprotoChainKeys(k, testPLC)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "a")
	d, err := Create(dir, keys)
	if err != nil {
		t.Fatal(err)
	}
	if d.Repo != testPLC || d.AnyKey == nil || d.AnyKey.DID() != k.DID() || d.Chain != k.DID() {
		t.Fatalf("device: %+v", d)
	}
	if cfg := d.Config(); cfg.RepoDID != testPLC || !cfg.Bootstrap {
		t.Fatalf("config: %+v", cfg)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ChainKeyFile))
	if !strings.Contains(string(raw), `"k256"`) {
		t.Fatalf("chain.key: %s", raw)
	}
	ed, _ := NewChainKeys()
	for name, tc := range map[string]Keys{
		"malformed did:plc": func() Keys { k := keys; k.Repo = "did:plc:nope"; return k }(),
		"did:web":           func() Keys { k := keys; k.Repo = "did:web:example.com"; return k }(),
		"not the founder":   func() Keys { k := keys; k.Founder = false; return k }(),
		"a baton chain":     func() Keys { k := ed; k.Repo = testPLC; return k }(),
	} {
		dir := filepath.Join(t.TempDir(), "x")
		if _, err := Create(dir, tc); err == nil {
			t.Errorf("%s: created", name)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: left %s behind", name, dir)
		}
	}
	doc := filepath.Join(dir, DeviceFile)
	b, _ := os.ReadFile(doc)
	if err := os.WriteFile(doc, []byte(strings.Replace(string(b), testPLC, "did:plc:Ewvi7nxzyoun6zhxrhs64oiz", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, chain.ErrInvalidDID) {
		t.Fatalf("open with a malformed repo: %v", err)
	}
}

// TestInviteAtprotoKey: an invite carries a P-256 or K-256 chain key (its type beside
// the seed) and the key's history marker, as it does an Ed25519 key: the joining
// device's chain.key is the same key of the same type and its chain.genesis the
// same marker. An invite without the key for an atproto chain parses (it was refused
// as an unsupported did:key before). An explicit ed25519 type, an unknown type, a
// type without a key and a type that is not the seed's are refused.
func TestInviteAtprotoKey(t *testing.T) {
	for _, typ := range []string{atproto.KeyTypeP256, atproto.KeyTypeK256} {
		t.Run(typ, func(t *testing.T) {
			k, err := atproto.GenerateKeyOf(typ)
			if err != nil {
				t.Fatal(err)
			}
			keys, err := NewAtprotoChainKeys(k, testPLC)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Create(filepath.Join(t.TempDir(), "a"), keys)
			if err != nil {
				t.Fatal(err)
			}
			hist := []byte(`{"chain":"` + k.DID() + `","genesis":"` + strings.Repeat("ab", 32) + `","index":3}` + "\n")
			if err := os.WriteFile(filepath.Join(d.Dir, node.GenesisFileName), hist, 0o600); err != nil {
				t.Fatal(err)
			}
			exp := time.Now().Add(time.Hour)
			s := testInvite(t, d, true, exp)
			in, err := ParseInvite(s)
			if err != nil {
				t.Fatal(err)
			}
			if in.AnyKey == nil || in.AnyKey.DID() != k.DID() || in.Key != nil || !bytes.Equal(in.History, hist) {
				t.Fatalf("invite: %+v", in)
			}
			if again, err := in.Encode(); err != nil || again != s {
				t.Fatalf("re-encode: %v", err)
			}
			j, err := Create(filepath.Join(t.TempDir(), "b"), in.Keys())
			if err != nil {
				t.Fatal(err)
			}
			if j.AnyKey == nil || j.AnyKey.DID() != k.DID() || j.Founder || j.Repo != "" {
				t.Fatalf("joined device: %+v", j)
			}
			raw, _ := os.ReadFile(filepath.Join(j.Dir, ChainKeyFile))
			if !strings.Contains(string(raw), `"`+typ+`"`) {
				t.Fatalf("joined chain.key: %s", raw)
			}
			if got, _ := os.ReadFile(filepath.Join(j.Dir, node.GenesisFileName)); !bytes.Equal(got, hist) {
				t.Fatalf("joined chain.genesis: %s", got)
			}
			noKey, err := ParseInvite(testInvite(t, d, false, exp))
			if err != nil || noKey.AnyKey != nil || noKey.Chain != k.DID() {
				t.Fatalf("invite without the key: %+v %v", noKey, err)
			}
			raw, _ = base64.RawURLEncoding.DecodeString(s[len(InvitePrefix):])
			mutate := func(f func(m map[string]any)) string {
				var m map[string]any
				json.Unmarshal(raw, &m)
				f(m)
				b, _ := json.Marshal(m)
				return InvitePrefix + base64.RawURLEncoding.EncodeToString(b)
			}
			other := atproto.KeyTypeK256
			if typ == other {
				other = atproto.KeyTypeP256
			}
			for name, bad := range map[string]string{
				"explicit ed25519": mutate(func(m map[string]any) { m["kt"] = "ed25519" }),
				"unknown type":     mutate(func(m map[string]any) { m["kt"] = "rsa" }),
				"the other curve":  mutate(func(m map[string]any) { m["kt"] = other }),
				"no type":          mutate(func(m map[string]any) { delete(m, "kt") }),
				"type without key": mutate(func(m map[string]any) { delete(m, "key"); delete(m, "hist") }),
			} {
				if _, err := ParseInvite(bad); !errors.Is(err, ErrBadInvite) {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}

// FuzzParseInvite: ParseInvite never panics; an invite it accepts encodes again to one
// it reads back the same (chain, key and its type, history marker, network key).
func FuzzParseInvite(f *testing.F) {
	for _, typ := range []string{"ed25519", atproto.KeyTypeP256, atproto.KeyTypeK256} {
		var keys Keys
		var err error
		if typ == "ed25519" {
			keys, err = NewChainKeys()
		} else {
			k, _ := atproto.GenerateKeyOf(typ)
			keys, err = NewAtprotoChainKeys(k, "")
		}
		if err != nil {
			f.Fatal(err)
		}
		d, err := Create(filepath.Join(f.TempDir(), typ), keys)
		if err != nil {
			f.Fatal(err)
		}
		for _, withKey := range []bool{true, false} {
			in, err := NewInvite(d, []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"},
				[]byte("0123456789abcdef"), time.Now().Add(time.Hour), withKey)
			if err != nil {
				f.Fatal(err)
			}
			s, _ := in.Encode()
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseInvite(s)
		if err != nil {
			if !errors.Is(err, ErrBadInvite) {
				t.Fatalf("refused without ErrBadInvite: %v", err)
			}
			return
		}
		enc, err := in.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseInvite(enc)
		if err != nil {
			t.Fatalf("re-encoded invite refused: %v", err)
		}
		if again.Chain != in.Chain || !bytes.Equal(again.PSK, in.PSK) || !bytes.Equal(again.History, in.History) ||
			(again.AnyKey == nil) != (in.AnyKey == nil) || (in.AnyKey != nil && again.AnyKey.DID() != in.AnyKey.DID()) ||
			again.keyType != in.keyType || (again.Key == nil) != (in.Key == nil) {
			t.Fatalf("re-encoded invite differs: %+v vs %+v", again, in)
		}
	})
}
