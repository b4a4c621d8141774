package signer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/transport"
)

func TestCodeMapping(t *testing.T) {
	cases := []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("x: %w", ErrBadPath), CodeBadPath, 400},
		{fmt.Errorf("x: %w", ErrTooLarge), CodeTooLarge, 413},
		{intentlog.ErrEntryTooLarge, CodeTooLarge, 413},
		{election.ErrNoReason, CodeBadRequest, 400},
		{intentlog.ErrNotFound, CodeNotFound, 404},
		{fmt.Errorf("release: %w", election.ErrNotHolder), CodeNotHolder, 409},
		{&election.HeldError{}, CodeLeaseHeld, 409},
		{election.ErrLostRace, CodeLeaseHeld, 409},
		{transport.ErrLastVoter, CodeConflict, 409},
		{fmt.Errorf("%w: %w", transport.ErrNoLeader, context.DeadlineExceeded), CodeNoQuorum, 503},
		{fmt.Errorf("%w: %w", transport.ErrTimeout, context.DeadlineExceeded), CodeTimeout, 504},
		{intentlog.ErrLeadershipLost, CodeNotLeader, 503},
		{intentlog.ErrClosed, CodeStopped, 503},
		{errors.New("disk on fire"), CodeInternal, 500},
		{fmt.Errorf("add: %w", transport.ErrHandshake), CodeUnreachable, 502},
		{transport.ErrNotMember, CodeConflict, 409},
		{transport.ErrBadToken, CodeUnauthorized, 401},
		{rejection(intentlog.IntentResult{ID: "x", Reason: intentlog.ReasonBacklog}), CodeBacklog, 503},
		{rejection(intentlog.IntentResult{ID: "x", Reason: intentlog.ReasonBadPath}), CodeBadPath, 400},
		{&APIError{Status: 409, Code: CodeNotHolder}, CodeNotHolder, 409},
	}
	for _, tc := range cases {
		code, status := Code(tc.err)
		if code != tc.code || status != tc.status {
			t.Errorf("%v: %s %d, want %s %d", tc.err, code, status, tc.code, tc.status)
		}
	}
	// Every code the API can answer unwraps to a sentinel.
	for code := range codeSentinel {
		e := &APIError{Status: http.StatusTeapot, Code: code}
		if errors.Unwrap(e) == nil {
			t.Errorf("code %s has no sentinel", code)
		}
	}
	if !errors.Is(&APIError{Code: CodeNoQuorum}, ErrNoQuorum) || errors.Is(&APIError{Code: "new_code"}, ErrInternal) {
		t.Fatal("APIError unwrap")
	}
	if _, err := NewClient("", ""); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty target: %v", err)
	}
	if _, err := NewClient("http://", ""); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad url: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	psk, err := transport.GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	key := testKey(t, 1)
	other := testKey(t, 2)
	good := func() Config { return Config{DataDir: t.TempDir(), PSK: psk, ChainKey: key} }
	cases := map[string]func(*Config){
		"no data dir":          func(c *Config) { c.DataDir = "" },
		"no psk":               func(c *Config) { c.PSK = nil },
		"short psk":            func(c *Config) { c.PSK = psk[:16] },
		"chain is not the key": func(c *Config) { c.Chain = other.DID() },
		"no chain, no key":     func(c *Config) { c.ChainKey = nil },
		"bad chain did":        func(c *Config) { c.ChainKey, c.Chain = nil, "did:key:zNope" },
		"bootstrap and join":   func(c *Config) { c.Bootstrap, c.Join = true, &JoinConfig{Seeds: []string{"x"}} },
		"join without seeds":   func(c *Config) { c.Join = &JoinConfig{Token: []byte("t")} },
		"negative ttl":         func(c *Config) { c.TTL = -1 },
		"public tcp, no token": func(c *Config) { c.APIAddr = "0.0.0.0:7421" },
		"bad tcp addr":         func(c *Config) { c.APIAddr = "nonsense" },
	}
	for name, mod := range cases {
		c := good()
		mod(&c)
		if err := c.setDefaults(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := good()
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.Chain != key.DID() || c.TTL != DefaultNodeTTL || c.Tick != DefaultNodeTick || c.Clock == nil ||
		c.APISocket != filepath.Join(c.DataDir, SocketFile) || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	replica := good()
	replica.ChainKey, replica.Chain = nil, key.DID()
	if err := replica.setDefaults(); err != nil {
		t.Fatalf("replica: %v", err)
	}
	if _, err := Start(context.Background(), Config{}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Start with an empty config: %v", err)
	}
}
