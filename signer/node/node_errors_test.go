package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/transport"
)

func TestConfigValidation(t *testing.T) {
	psk, err := transport.GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	key := testutil.Key(t, 1)
	other := testutil.Key(t, 2)
	good := func() Config { return Config{DataDir: t.TempDir(), PSK: psk, ChainKey: key} }
	cases := map[string]func(*Config){
		"no data dir":               func(c *Config) { c.DataDir = "" },
		"no psk":                    func(c *Config) { c.PSK = nil },
		"short psk":                 func(c *Config) { c.PSK = psk[:16] },
		"chain is not the key":      func(c *Config) { c.Chain = other.DID() },
		"no chain, no key":          func(c *Config) { c.ChainKey = nil },
		"bad chain did":             func(c *Config) { c.ChainKey, c.Chain = nil, "did:key:zNope" },
		"bootstrap and join":        func(c *Config) { c.Bootstrap, c.Join = true, &JoinConfig{Seeds: []string{"x"}} },
		"join without seeds":        func(c *Config) { c.Join = &JoinConfig{Token: []byte("t")} },
		"negative ttl":              func(c *Config) { c.TTL = -1 },
		"repo DID on a baton chain": func(c *Config) { c.RepoDID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz" },
		"malformed repo DID":        func(c *Config) { c.ChainKey, c.Chain, c.RepoDID = nil, atprotoDID(t), "did:plc:nope" },
	}
	for name, mod := range cases {
		c := good()
		mod(&c)
		if err := c.setDefaults(true); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := good()
	if err := c.setDefaults(true); err != nil {
		t.Fatal(err)
	}
	if c.Chain != key.DID() || c.TTL != DefaultNodeTTL || c.Tick != DefaultNodeTick || c.Clock == nil || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	replica := good()
	replica.ChainKey, replica.Chain = nil, key.DID()
	if err := replica.setDefaults(true); err != nil {
		t.Fatalf("replica: %v", err)
	}
	withRepo := good()
	withRepo.ChainKey, withRepo.Chain, withRepo.RepoDID = nil, atprotoDID(t), "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
	if err := withRepo.setDefaults(true); err != nil {
		t.Fatalf("an atproto chain naming its did:plc: %v", err)
	}
	if _, err := Start(context.Background(), Config{}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Start with an empty config: %v", err)
	}
}

// Every handover answer code unwraps, on the asking device, to the sentinel the
// holder's error matched; election's and the log's errors map to the node's.
func TestHandoverCodesRoundTrip(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{fmt.Errorf("transfer: %w", election.ErrNotHolder), ErrNotHolder},
		{fmt.Errorf("x: %w", election.ErrBadTarget), ErrBadRequest},
		{fmt.Errorf("x: %w", ErrConflict), ErrConflict},
		{fmt.Errorf("x: %w", election.ErrRejected), ErrRejected},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), ErrTimeout},
		{fmt.Errorf("x: %w", intentlog.ErrClosed), ErrStopped},
		{errors.New("disk on fire"), ErrInternal},
	}
	for _, c := range cases {
		if got := handoverSentinel(handoverCode(c.err)); got != c.want {
			t.Errorf("%v: code %q unwraps to %v, want %v", c.err, handoverCode(c.err), got, c.want)
		}
	}
}

// atprotoDID is the did:key of a new K-256 chain key (an atproto chain).
func atprotoDID(t *testing.T) string {
	k, err := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	if err != nil {
		t.Fatal(err)
	}
	return k.DID()
}
