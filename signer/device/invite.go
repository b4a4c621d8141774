package device

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// An invite is one line a new device is given out of band:
//
//	baton1<base64url of the JSON below, unpadded>
//
//	{"v":1,"net":"<network key, base64>","chain":"did:key:...",
//	 "key":"<chain key seed, base64; only with the chain key>",
//	 "kt":"<the chain key's type, p256 or k256; absent for ed25519>",
//	 "hist":"<the chain key's history marker, base64; with the key when it has one>",
//	 "addrs":["/ip4/.../tcp/.../p2p/12D3..."],"token":"<join token, base64url>","exp":<unix s>}
//
// It carries secrets (always the network key, optionally the chain key): treat it like
// a password, and keep it out of argv (files, stdin). The join token is valid until
// exp, once, and only while the inviting node runs (the join window lives in its
// memory).
const InvitePrefix = "baton1"

// MaxInviteLen bounds what ParseInvite tries to decode (a real invite is well under
// 2 KiB).
const MaxInviteLen = 16 << 10

type inviteDoc struct {
	V     int      `json:"v"`
	Net   string   `json:"net"`
	Chain string   `json:"chain"`
	Key   string   `json:"key,omitempty"`
	KT    string   `json:"kt,omitempty"`   // the chain key's type (chain key file type); absent: ed25519
	Hist  string   `json:"hist,omitempty"` // the chain key's history marker (base64), with the key
	Addrs []string `json:"addrs"`
	Token string   `json:"token"`
	Exp   int64    `json:"exp"`
}

// Invite is a decoded, validated invite.
type Invite struct {
	PSK   pnet.PSK
	Chain string
	Key   *chain.Ed25519Key // the chain key when it is Ed25519 and the invite carries it
	// AnyKey is the chain key the invite carries, whatever its type (an atproto chain's
	// P-256 or K-256 key); nil without one.
	AnyKey  chain.Key
	Addrs   []string // p2p multiaddrs of members (join seeds)
	Token   []byte   // the join window's token
	Expires time.Time
	History []byte // the chain key's history marker (Keys.History); only with AnyKey
	seed    []byte
	keyType string // the key file type of AnyKey
}

// NewJoinToken returns a fresh random join token.
func NewJoinToken() ([]byte, error) {
	t := make([]byte, 24)
	if _, err := rand.Read(t); err != nil {
		return nil, err
	}
	return t, nil
}

// NewInvite builds an invite for d's chain: the members' addresses and the token of
// a join window a running node opened (api.Client.AllowJoin), valid until exp. With
// withKey the invite carries the chain key (the new device can sign).
func NewInvite(d *Device, addrs []string, token []byte, exp time.Time, withKey bool) (*Invite, error) {
	in := &Invite{PSK: d.PSK, Chain: d.Chain, Addrs: addrs, Token: token, Expires: exp.Truncate(time.Second)}
	if withKey {
		typ, seed, err := d.ChainKeySeed()
		if err != nil {
			return nil, err
		}
		in.Key, in.AnyKey, in.seed, in.keyType = d.Key, d.AnyKey, seed, typ
		if in.History, err = ReadHistory(d.Dir, d.Chain); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// Encode returns the invite's one-line form.
func (in *Invite) Encode() (string, error) {
	doc := inviteDoc{
		V:     1,
		Net:   base64.StdEncoding.EncodeToString(in.PSK),
		Chain: in.Chain,
		Addrs: in.Addrs,
		Token: base64.RawURLEncoding.EncodeToString(in.Token),
		Exp:   in.Expires.Unix(),
	}
	if in.AnyKey != nil {
		if in.seed == nil {
			return "", fmt.Errorf("invite: the chain key's seed is unknown (build the invite with NewInvite)")
		}
		doc.Key = base64.StdEncoding.EncodeToString(in.seed)
		if in.keyType != "ed25519" {
			doc.KT = in.keyType
		}
		if in.History != nil {
			doc.Hist = base64.StdEncoding.EncodeToString(in.History)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	return InvitePrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// LooksLikeInvite reports whether s starts like an invite.
func LooksLikeInvite(s string) bool {
	return strings.HasPrefix(strings.TrimSpace(s), InvitePrefix)
}

// ReadInvite reads one invite from r (a file or stdin), at most MaxInviteLen bytes.
func ReadInvite(r io.Reader, name string) (*Invite, error) {
	b, err := readLimited(r, name, MaxInviteLen)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInvite, err)
	}
	return ParseInvite(string(b))
}

// ParseInvite decodes and checks an invite (not its expiry: see Expired).
func ParseInvite(s string) (*Invite, error) {
	s = strings.TrimSpace(s)
	if len(s) > MaxInviteLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadInvite, MaxInviteLen)
	}
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadInvite)
	}
	if !strings.HasPrefix(s, InvitePrefix) {
		return nil, fmt.Errorf("%w: it does not start with %q", ErrBadInvite, InvitePrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[len(InvitePrefix):])
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url (truncated when copied?)", ErrBadInvite)
	}
	var doc inviteDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInvite, err)
	}
	if doc.V != 1 {
		return nil, fmt.Errorf("%w: version %d, want 1 (made by a newer baton?)", ErrBadInvite, doc.V)
	}
	in := &Invite{Chain: doc.Chain, Addrs: doc.Addrs, Expires: time.Unix(doc.Exp, 0)}
	psk, err := base64.StdEncoding.DecodeString(doc.Net)
	if err != nil || len(psk) != transport.PSKSize {
		return nil, fmt.Errorf("%w: network key is not %d bytes of base64", ErrBadInvite, transport.PSKSize)
	}
	in.PSK = psk
	if err := signer.CheckChainDID(doc.Chain); err != nil {
		return nil, fmt.Errorf("%w: chain: %v", ErrBadInvite, err)
	}
	if doc.Key != "" {
		seed, err := base64.StdEncoding.DecodeString(doc.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: chain key is not base64", ErrBadInvite)
		}
		typ := doc.KT
		switch {
		case typ == "":
			typ = "ed25519"
		case typ == "ed25519": // written as absent: one encoding per invite
			return nil, fmt.Errorf("%w: kt %q", ErrBadInvite, typ)
		case !chain.KnownKeyType(typ):
			return nil, fmt.Errorf("%w: chain key of type %q (made by a newer baton?)", ErrBadInvite, typ)
		}
		k, err := chain.KeyFromSeed(typ, seed)
		if err != nil {
			return nil, fmt.Errorf("%w: chain key: %v", ErrBadInvite, err)
		}
		if k.DID() != doc.Chain {
			return nil, fmt.Errorf("%w: chain key does not match the chain %s", ErrBadInvite, doc.Chain)
		}
		in.AnyKey, in.seed, in.keyType = k, seed, typ
		in.Key, _ = k.(*chain.Ed25519Key)
		if doc.Hist != "" {
			h, err := base64.StdEncoding.DecodeString(doc.Hist)
			if err != nil {
				return nil, fmt.Errorf("%w: hist is not base64", ErrBadInvite)
			}
			if err := node.CheckHistory(h, doc.Chain); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadInvite, err)
			}
			in.History = h
		}
	} else if doc.Hist != "" || doc.KT != "" {
		return nil, fmt.Errorf("%w: a history marker or key type without the chain key", ErrBadInvite)
	}
	if len(doc.Addrs) == 0 {
		return nil, fmt.Errorf("%w: no member addresses", ErrBadInvite)
	}
	if _, err := transport.ParseSeeds(doc.Addrs); err != nil {
		return nil, fmt.Errorf("%w: addresses: %v", ErrBadInvite, err)
	}
	if in.Token, err = base64.RawURLEncoding.DecodeString(doc.Token); err != nil || len(in.Token) == 0 {
		return nil, fmt.Errorf("%w: join token missing or not base64url", ErrBadInvite)
	}
	if doc.Exp <= 0 {
		return nil, fmt.Errorf("%w: no expiry", ErrBadInvite)
	}
	return in, nil
}

// Expired reports whether the invite's token has expired at now.
func (in *Invite) Expired(now time.Time) bool { return !now.Before(in.Expires) }

// CheckFresh returns ErrExpired (with advice) when the invite has expired at now.
func (in *Invite) CheckFresh(now time.Time) error {
	if in.Expired(now) {
		return fmt.Errorf("%w at %s: ask a running device for a new one (`baton invite`)", ErrExpired, in.Expires.Format(time.RFC3339))
	}
	return nil
}

// Keys returns the keys the invite gives a new device.
func (in *Invite) Keys() Keys {
	return Keys{PSK: in.PSK, Chain: in.Chain, Key: in.Key, AnyKey: in.AnyKey, History: in.History}
}

// JoinConfig returns the node's join settings for this invite.
func (in *Invite) JoinConfig(nonvoter bool) *node.JoinConfig {
	return &node.JoinConfig{Seeds: append([]string(nil), in.Addrs...), Token: in.Token, NonVoter: nonvoter}
}

// Matches checks that the invite is for d's chain and network.
func (in *Invite) Matches(d *Device) error {
	if in.Chain != d.Chain {
		return fmt.Errorf("%w: the invite is for chain %s, but %s serves %s", ErrWrongChain, in.Chain, d.Dir, d.Chain)
	}
	if !bytes.Equal(d.PSK, in.PSK) {
		return fmt.Errorf("%w: the invite's network key differs from %s", ErrWrongChain, NetworkKeyFile)
	}
	return nil
}
