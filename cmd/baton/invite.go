package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// An invite is one line a new device is given out of band:
//
//	baton1<base64url of the JSON below, unpadded>
//
//	{"v":1,"net":"<network key, base64>","chain":"did:key:...",
//	 "key":"<chain key seed, base64; only with --with-chain-key>",
//	 "addrs":["/ip4/.../tcp/.../p2p/12D3..."],"token":"<join token, base64url>","exp":<unix s>}
//
// It carries secrets (always the network key, optionally the chain key): treat it like
// a password. The join token is valid only until exp, and only while the inviting node
// runs (the join window lives in its memory).
const invitePrefix = "baton1"

// maxInviteLen bounds what we try to decode (a real invite is well under 2 KiB).
const maxInviteLen = 16 << 10

type inviteDoc struct {
	V     int      `json:"v"`
	Net   string   `json:"net"`
	Chain string   `json:"chain"`
	Key   string   `json:"key,omitempty"`
	Addrs []string `json:"addrs"`
	Token string   `json:"token"`
	Exp   int64    `json:"exp"`
}

// invite is a decoded, validated invite.
type invite struct {
	psk   pnet.PSK
	chain string
	key   *chain.Ed25519Key // nil unless the invite carries the chain key
	addrs []string
	token []byte
	exp   time.Time
}

func newJoinToken() ([]byte, error) {
	t := make([]byte, 24)
	if _, err := rand.Read(t); err != nil {
		return nil, err
	}
	return t, nil
}

func encodeInvite(in invite, seed []byte) (string, error) {
	doc := inviteDoc{
		V:     1,
		Net:   base64.StdEncoding.EncodeToString(in.psk),
		Chain: in.chain,
		Addrs: in.addrs,
		Token: base64.RawURLEncoding.EncodeToString(in.token),
		Exp:   in.exp.Unix(),
	}
	if seed != nil {
		doc.Key = base64.StdEncoding.EncodeToString(seed)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	return invitePrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func looksLikeInvite(s string) bool {
	return strings.HasPrefix(strings.TrimSpace(s), invitePrefix)
}

// decodeInvite parses and checks an invite (not its expiry: see expired).
func decodeInvite(s string) (*invite, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxInviteLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", errBadInvite, maxInviteLen)
	}
	if !strings.HasPrefix(s, invitePrefix) {
		return nil, fmt.Errorf("%w: it does not start with %q", errBadInvite, invitePrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[len(invitePrefix):])
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url (truncated when copied?)", errBadInvite)
	}
	var doc inviteDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadInvite, err)
	}
	if doc.V != 1 {
		return nil, fmt.Errorf("%w: version %d, want 1 (made by a newer baton?)", errBadInvite, doc.V)
	}
	in := &invite{chain: doc.Chain, addrs: doc.Addrs, exp: time.Unix(doc.Exp, 0)}
	psk, err := base64.StdEncoding.DecodeString(doc.Net)
	if err != nil || len(psk) != transport.PSKSize {
		return nil, fmt.Errorf("%w: network key is not %d bytes of base64", errBadInvite, transport.PSKSize)
	}
	in.psk = psk
	if _, err := chain.ParseDID(doc.Chain); err != nil {
		return nil, fmt.Errorf("%w: chain: %v", errBadInvite, err)
	}
	if doc.Key != "" {
		seed, err := base64.StdEncoding.DecodeString(doc.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: chain key is not base64", errBadInvite)
		}
		k, err := chain.NewEd25519KeyFromSeed(seed)
		if err != nil {
			return nil, fmt.Errorf("%w: chain key: %v", errBadInvite, err)
		}
		if k.DID() != doc.Chain {
			return nil, fmt.Errorf("%w: chain key does not match the chain %s", errBadInvite, doc.Chain)
		}
		in.key = k
	}
	if len(doc.Addrs) == 0 {
		return nil, fmt.Errorf("%w: no member addresses", errBadInvite)
	}
	if _, err := transport.ParseSeeds(doc.Addrs); err != nil {
		return nil, fmt.Errorf("%w: addresses: %v", errBadInvite, err)
	}
	if in.token, err = base64.RawURLEncoding.DecodeString(doc.Token); err != nil || len(in.token) == 0 {
		return nil, fmt.Errorf("%w: join token missing or not base64url", errBadInvite)
	}
	if doc.Exp <= 0 {
		return nil, fmt.Errorf("%w: no expiry", errBadInvite)
	}
	return in, nil
}

func (in *invite) expired(now time.Time) bool { return !now.Before(in.exp) }
