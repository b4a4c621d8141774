package atproto

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/chain"
)

// TestImportKey: every form a PDS operator holds an account's signing key in reads to
// the same key (multibase with its curve, hex and raw bytes with the curve given or
// named by the env line); what does not say its curve, a curve that contradicts the
// encoding, public keys and other text are refused with ErrKeyImport.
func TestImportKey(t *testing.T) {
	for _, typ := range []string{KeyTypeP256, KeyTypeK256} {
		k, err := GenerateKeyOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		other := KeyTypeK256
		if typ == KeyTypeK256 {
			other = KeyTypeP256
		}
		hx := hex.EncodeToString(k.Bytes())
		mb := k.priv.(interface{ Multibase() string }).Multibase()
		envName := "PDS_REPO_SIGNING_KEY_" + strings.ToUpper(typ) + "_PRIVATE_KEY_HEX"
		good := []struct {
			name, typ string
			data      []byte
		}{
			{"multibase", "", []byte(mb + "\n")},
			{"multibase, type given", typ, []byte(mb)},
			{"hex", typ, []byte(hx + "\n")},
			{"upper hex", typ, []byte(strings.ToUpper(hx))},
			{"raw", typ, k.Bytes()},
			{"env line", "", []byte(envName + "=" + hx + "\n")},
			{"export env line, quoted", typ, []byte("export " + envName + `="` + hx + `"`)},
			{"env line, multibase", "", []byte("KEY=" + mb)},
		}
		for _, g := range good {
			got, err := ImportKey(g.data, g.typ)
			if err != nil {
				t.Errorf("%s %s: %v", typ, g.name, err)
				continue
			}
			if got.DID() != k.DID() || got.Type() != typ {
				t.Errorf("%s %s: %s (%s), want %s", typ, g.name, got.DID(), got.Type(), k.DID())
			}
		}
		bad := []struct {
			name, typ string
			data      []byte
		}{
			{"hex without a curve", "", []byte(hx)},
			{"raw without a curve", "", k.Bytes()},
			{"multibase of the other curve", other, []byte(mb)},
			{"env line naming the other curve", other, []byte(envName + "=" + hx)},
			{"a did:key", "", []byte(k.DID())},
			{"short hex", typ, []byte(hx[:62])},
			{"two lines", typ, []byte(hx + "\n" + hx + "\n")},
			{"PEM", typ, []byte("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n")},
			{"binary of 33 bytes", typ, append(k.Bytes(), 0)},
			{"an unknown type", "ed25519", []byte(hx)},
			{"empty", typ, nil},
		}
		for _, b := range bad {
			if _, err := ImportKey(b.data, b.typ); !errors.Is(err, ErrKeyImport) {
				t.Errorf("%s %s: %v, want ErrKeyImport", typ, b.name, err)
			}
		}
	}
	// The zero scalar is no key.
	if _, err := ImportKey(make([]byte, 32), KeyTypeK256); !errors.Is(err, ErrKeyImport) {
		t.Errorf("zero key: %v", err)
	}
}

// TestCheckRepoDID: a did:plc in its exact syntax is a repository DID; a malformed
// one, did:web and did:key are refused.
func TestCheckRepoDID(t *testing.T) {
	if err := CheckRepoDID(testDID); err != nil {
		t.Fatal(err)
	}
	k, _ := GenerateKey()
	for _, did := range []string{"", "did:plc:", "did:plc:ewvi7nxzyoun6zhxrhs64oi", "did:plc:ewvi7nxzyoun6zhxrhs64oizz",
		"did:plc:EWVI7NXZYOUN6ZHXRHS64OIZ", "did:plc:ewvi7nxzyoun6zhxrhs64oi0", "did:plc:ewvi7nxzyoun6zhxrhs64oi1",
		"did:plc:ewvi7nxzyoun6zhxrhs64oiz\n", " did:plc:ewvi7nxzyoun6zhxrhs64oiz", "did:web:example.com", k.DID(), "plc:ewvi7nxzyoun6zhxrhs64oiz"} {
		if err := CheckRepoDID(did); !errors.Is(err, chain.ErrInvalidDID) {
			t.Errorf("%q: %v", did, err)
		}
	}
}
