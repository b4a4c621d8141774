package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// Issue 38 item 6: log time, the dedupe window's clock, moves by at most one step per
// entry, max(retention/16, the lease's TTL, 1 s). With a TTL near the retention, one
// step of a wall clock moves log time by a whole TTL, and the window forgets what it
// was to remember for the retention: an acknowledged ID may then apply twice. A
// configuration whose TTL is over a sixteenth of the retention is refused, with an
// error that names both and says what to do.
func TestTTLBoundedByRetention(t *testing.T) {
	psk, key := testutil.PSK(t), testutil.Key(t, 21)
	good := func() Config {
		return Config{DataDir: t.TempDir(), PSK: psk, ChainKey: key, Bootstrap: true}
	}
	refused := func(what string, c Config, ttl, retention string) {
		t.Helper()
		err := c.setDefaults(true)
		if !errors.Is(err, ErrBadConfig) {
			t.Fatalf("%s: %v, want ErrBadConfig", what, err)
		}
		for _, s := range []string{ttl, retention, "TTL", "retention"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("%s: the error does not name %q: %v", what, s, err)
			}
		}
	}
	c := good()
	c.TTL, c.Tick = 2*time.Hour, 10*time.Second
	refused("a 2h TTL for the default 24h retention", c, "2h0m0s", "24h0m0s")
	c = good()
	c.TTL, c.Tick, c.Retention = time.Hour, 10*time.Second, time.Hour
	refused("a TTL equal to the retention", c, "1h0m0s", "1h0m0s")
	c = good()
	c.TTL, c.Tick, c.Retention = 1601*time.Millisecond, 100*time.Millisecond, 25600*time.Millisecond
	refused("a TTL just over a sixteenth of the retention", c, "1.601s", "25.6s")

	c = good()
	c.TTL, c.Tick = 90*time.Minute, 10*time.Second
	if err := c.setDefaults(true); err != nil {
		t.Fatalf("a TTL of a sixteenth of the default retention: %v", err)
	}
	c = good()
	c.TTL, c.Retention = time.Hour, time.Hour
	c.Bootstrap = false // the genesis's retention decides, not this device's
	if err := c.setDefaults(true); err != nil {
		t.Fatalf("a device that does not write the genesis: %v", err)
	}

	// Where the genesis is known: a device joining (or restarting in) a cluster whose
	// genesis retention is too short for its TTL refuses to start.
	cfg := nodeConfig(t, t.TempDir(), psk, key)
	cfg.Bootstrap, cfg.Retention = true, 16*nodeTTL
	first := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := first.Submit(ctx, testutil.Put("r-1"), WaitSigned); err != nil {
		t.Fatal(err)
	}
	token := []byte("retention-join-token")
	first.AllowJoin(token, time.Now().Add(time.Minute))
	jcfg := nodeConfig(t, t.TempDir(), psk, key)
	jcfg.Join = &JoinConfig{Seeds: first.Addrs(), Token: token}
	jcfg.TTL = 2 * nodeTTL
	_, err := Start(ctx, jcfg)
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "2s") || !strings.Contains(err.Error(), "16s") {
		t.Fatalf("join with a TTL over a sixteenth of the genesis retention: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the refused device gone from the members", func() bool { return first.State().Members == 1 })
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rcfg := cfg
	rcfg.TTL, rcfg.Retention = 2*nodeTTL, 0 // the config's retention is not the genesis's
	if _, err := Start(ctx, rcfg); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("restart with a TTL over a sixteenth of the genesis retention: %v", err)
	}
}
