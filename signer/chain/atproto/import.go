package atproto

import (
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/batonhq/baton/signer/chain"
)

// ErrKeyImport wraps every reason ImportKey refuses its input for.
var ErrKeyImport = errors.New("cannot import the atproto signing key")

// ImportKey reads an existing account's #atproto signing key in the forms a PDS
// operator or an atproto tool holds it:
//
//   - multibase: "z" + base58btc of the multicodec p256-priv (0x1306) or
//     secp256k1-priv (0x1301) prefix and the 32 key bytes (goat's `key generate`);
//     the curve is in the encoding;
//   - 64 hex characters: the 32 key bytes (a PDS's *_PRIVATE_KEY_HEX settings, such as
//     the reference PDS's PDS_REPO_SIGNING_KEY_K256_PRIVATE_KEY_HEX);
//   - 32 raw bytes: the reference PDS's per-account key file (its actor store's
//     `<sha256(did)[:2]>/<did>/key`, K-256);
//   - one NAME=VALUE line (an env file's) with one of the above as the value; a NAME
//     holding K256 or P256 says the curve.
//
// typ (KeyTypeP256, KeyTypeK256 or "") is the curve the caller was told; hex and raw
// bytes do not say theirs, so they need it (from typ or the NAME), and a multibase
// key or a NAME must agree with it. Anything else (a public key, a did:key, several
// lines, a PEM file) is refused with the forms it takes.
func ImportKey(data []byte, typ string) (*Key, error) {
	if typ != "" && typ != KeyTypeP256 && typ != KeyTypeK256 {
		return nil, fmt.Errorf("%w: key type %q (want %s or %s)", ErrKeyImport, typ, KeyTypeP256, KeyTypeK256)
	}
	if len(data) == 32 && !isText(data) {
		if typ == "" {
			return nil, fmt.Errorf("%w: 32 raw bytes do not say their curve: give the key type (k256 for the reference PDS's account keys)", ErrKeyImport)
		}
		return wrapImport(ParseKeyOf(typ, data))
	}
	if !isText(data) {
		return nil, fmt.Errorf("%w: %d bytes that are not text nor a 32-byte raw key; want %s", ErrKeyImport, len(data), importForms)
	}
	s := strings.TrimSpace(string(data))
	if strings.Contains(s, "\n") {
		return nil, fmt.Errorf("%w: %d lines; give a file with the one key (not a whole env file: it also holds the PLC rotation key, which is not the #atproto key)", ErrKeyImport, strings.Count(s, "\n")+1)
	}
	if m := envLine.FindStringSubmatch(s); m != nil {
		name, val := m[1], m[2]
		up := strings.ToUpper(name)
		var named string
		switch {
		case strings.Contains(up, "K256") || strings.Contains(up, "SECP256K1"):
			named = KeyTypeK256
		case strings.Contains(up, "P256"):
			named = KeyTypeP256
		}
		if named != "" && typ != "" && named != typ {
			return nil, fmt.Errorf("%w: %s names a %s key, but the key type given is %s", ErrKeyImport, name, named, typ)
		}
		if named != "" {
			typ = named
		}
		s = strings.Trim(strings.TrimSpace(val), `"'`)
	}
	switch {
	case strings.HasPrefix(s, "did:"):
		return nil, fmt.Errorf("%w: %q is a DID (public); the private key is needed", ErrKeyImport, abbrev(s))
	case strings.HasPrefix(s, "z"):
		priv, err := atcrypto.ParsePrivateMultibase(s)
		if err != nil {
			return nil, fmt.Errorf("%w: not a multibase private key (p256-priv or secp256k1-priv): %v", ErrKeyImport, err)
		}
		got := KeyTypeP256
		if _, ok := priv.(*atcrypto.PrivateKeyK256); ok {
			got = KeyTypeK256
		}
		if typ != "" && typ != got {
			return nil, fmt.Errorf("%w: the multibase key is %s, but the key type given is %s", ErrKeyImport, got, typ)
		}
		return wrapImport(keyOf(priv, got))
	case len(s) == 64 && isHex(s):
		if typ == "" {
			return nil, fmt.Errorf("%w: a hex key does not say its curve: give the key type (k256 for the reference PDS's keys, whose settings say K256)", ErrKeyImport)
		}
		b, _ := hex.DecodeString(s)
		return wrapImport(ParseKeyOf(typ, b))
	}
	return nil, fmt.Errorf("%w: want %s", ErrKeyImport, importForms)
}

const importForms = "a multibase private key (z...), 64 hex characters, 32 raw bytes, or one NAME=VALUE line with one of these"

func wrapImport(k *Key, err error) (*Key, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyImport, err)
	}
	return k, nil
}

func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// envLine is a NAME=VALUE line of an env file (optionally "export NAME=VALUE").
var envLine = regexp.MustCompile(`^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$`)

// plcDID is did:plc's syntax: 24 characters of lower-case base32 (the truncated hash
// of the identity's genesis operation).
var plcDID = regexp.MustCompile(`^did:plc:[a-z2-7]{24}$`)

// CheckRepoDID checks a repository DID a chain may name in its genesis (instead of
// its chain key's did:key): a did:plc in its exact syntax. It does not resolve it
// (no network): that the DID document's #atproto key is the chain key is the user's
// to make sure of (a PLC operation signed with one of the identity's rotation keys).
// did:web is not accepted (not done).
func CheckRepoDID(did string) error {
	if plcDID.MatchString(did) {
		return nil
	}
	if strings.HasPrefix(did, "did:plc:") {
		return fmt.Errorf("%w: %q is not a did:plc (did:plc: then 24 characters a-z, 2-7)", chain.ErrInvalidDID, abbrev(did))
	}
	return fmt.Errorf("%w: %q: a repository DID is a did:plc (did:web is not supported)", chain.ErrInvalidDID, abbrev(did))
}

func abbrev(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
