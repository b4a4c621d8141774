package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

const runUsage = `Usage: baton run [--data DIR] [--listen ADDR,...] [--ttl D] [--tick D] [flags]

Runs this device's node in the foreground until SIGINT/SIGTERM: the libp2p host, the
Raft intent log, the lease, the signer loop (when this device holds the chain key) and
the local API on DIR/baton.sock. Logs go to stderr. The first signal stops gracefully
(a held lease is released, so another device takes over at once); a second aborts.

The device made with ` + "`init --new-chain`" + ` bootstraps the cluster on its first run.
Others join once, with ` + "`baton join INVITE`" + ` (or run --join INVITE); after that a plain
` + "`baton run`" + ` restarts them. Keep a device's --listen addresses stable across restarts:
the other members remember them.

Examples:
  baton run --data ~/.baton
  baton run --data /tmp/b1 --listen /ip4/127.0.0.1/tcp/7401 --ttl 5s --tick 500ms
  BATON_DATA=/tmp/b2 BATON_LISTEN=/ip4/127.0.0.1/tcp/7402 baton run --join "$INVITE"
`

const joinUsage = `Usage: baton join [run flags] INVITE

Runs the node like ` + "`baton run`" + `, joining the cluster of INVITE (from ` + "`baton invite`" + ` on a
running device) on the first start. If the data dir is not initialized yet, it is
initialized from the invite first (as ` + "`baton init --from INVITE`" + `). On later starts the
invite is not needed (and may have expired): the device rejoins as a member.

Examples:
  baton join --data /tmp/b2 --listen /ip4/127.0.0.1/tcp/7402 "$(cat invite.txt)"
`

// runFlags are the flags of run and join.
type runFlags struct {
	data         *string
	listen       *string
	apiAddr      *string
	apiTokenFile *string
	ttl          *time.Duration
	tick         *time.Duration
	bootstrap    *bool
	newHistory   *bool
	join         *string
	joinToken    *string
	nonvoter     *bool
	raftTimeout  *time.Duration
	logLevel     *string
	logFormat    *string
}

func addRunFlags(fs *flag.FlagSet, withJoin bool) *runFlags {
	f := &runFlags{
		data:         dataFlag(fs),
		listen:       fs.String("listen", strings.Join(transport.DefaultListenAddrs, ","), "libp2p TCP listen `multiaddrs`, comma-separated"),
		apiAddr:      fs.String("api-addr", "", "also serve the API on this TCP `host:port` (always with a bearer token)"),
		apiTokenFile: fs.String("api-token-file", "", "the TCP API's bearer token `file` (default DIR/api.token, created 0600 when missing)"),
		ttl:          fs.Duration("ttl", node.DefaultNodeTTL, "lease TTL of this device's claims"),
		tick:         fs.Duration("tick", node.DefaultNodeTick, "signer loop tick (lease renewal cadence)"),
		bootstrap:    fs.Bool("bootstrap", false, "bootstrap a new cluster on first start (implied for the device made with init --new-chain)"),
		newHistory:   fs.Bool("start-second-history", false, "with --bootstrap, allow a chain key that already has a history (chain.genesis) to start another one: readers of the first see a fork"),
		nonvoter:     fs.Bool("nonvoter", false, "join as a non-voter (a replica that does not count for quorum)"),
		raftTimeout:  fs.Duration("raft-timeout", 0, "Raft heartbeat and election timeout (0: TTL/5 within 1s-5s, which keeps an idle leader's CPU low); lower for tests"),
		logLevel:     fs.String("log-level", "info", "log `level`: debug, info, warn, error"),
		logFormat:    fs.String("log-format", "text", "log `format`: text or json"),
	}
	if withJoin {
		f.join = fs.String("join", "", "join a cluster on first start: an `INVITE`, or member p2p multiaddrs (comma-separated, with --join-token)")
		f.joinToken = fs.String("join-token", "", "the join window's token (base64url) when --join gives addresses")
	} else {
		empty := ""
		f.join, f.joinToken = &empty, &empty
	}
	return f
}

func cmdRun(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("run", runUsage)
	f := addRunFlags(fs, true)
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	return c.runNode(ctx, f, nil)
}

func cmdJoin(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("join", joinUsage)
	f := addRunFlags(fs, false)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want exactly one INVITE argument, got %d", fs.NArg())
	}
	inv, err := decodeInvite(fs.Arg(0))
	if err != nil {
		return usagef("%v", err)
	}
	if !exists(filepath.Join(*f.data, deviceFile)) {
		id, err := writeDevice(*f.data, keys{psk: inv.psk, chain: inv.chain, key: inv.key})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stderr, "initialized %s from the invite: device %s, chain %s\n", *f.data, id, inv.chain)
	}
	return c.runNode(ctx, f, inv)
}

// nodeConfig builds the node.Config of a device and its flags.
func (c *cli) nodeConfig(f *runFlags, inv *invite) (node.Config, *device, error) {
	d, err := loadDevice(*f.data)
	if err != nil {
		return node.Config{}, nil, err
	}
	if *f.ttl <= 0 || *f.tick <= 0 {
		return node.Config{}, nil, usagef("--ttl and --tick must be positive")
	}
	if *f.tick >= *f.ttl {
		return node.Config{}, nil, usagef("--tick (%s) must be well below --ttl (%s)", *f.tick, *f.ttl)
	}
	logger, err := newLogger(c, *f.logLevel, *f.logFormat)
	if err != nil {
		return node.Config{}, nil, err
	}
	cfg := node.Config{
		DataDir:     d.dir,
		ListenAddrs: splitList(*f.listen),
		PSK:         d.psk,
		Chain:       d.chain,
		Bootstrap:   *f.bootstrap || d.first,
		NewHistory:  *f.newHistory,
		TTL:         *f.ttl,
		Tick:        *f.tick,
		Logger:      logger,
	}
	if d.key != nil {
		cfg.ChainKey = d.key
	}
	if len(cfg.ListenAddrs) == 0 {
		return node.Config{}, nil, usagef("--listen is empty")
	}
	if rt := *f.raftTimeout; rt > 0 {
		cfg.Raft = func(rc *raft.Config) {
			rc.HeartbeatTimeout = rt
			rc.ElectionTimeout = rt
			rc.LeaderLeaseTimeout = rt / 2
		}
	}
	has, err := intentlog.HasState(d.dir)
	if err != nil {
		return node.Config{}, nil, err
	}
	fresh := !has
	switch {
	case inv == nil && *f.join != "" && looksLikeInvite(*f.join):
		if inv, err = decodeInvite(*f.join); err != nil {
			return node.Config{}, nil, usagef("--join: %v", err)
		}
	case inv == nil && *f.join != "":
		tok, err := decodeToken(*f.joinToken)
		if err != nil {
			return node.Config{}, nil, usagef("--join-token: %v", err)
		}
		seeds := splitList(*f.join)
		if _, err := transport.ParseSeeds(seeds); err != nil {
			return node.Config{}, nil, usagef("--join: %v", err)
		}
		cfg.Join = &node.JoinConfig{Seeds: seeds, Token: tok, NonVoter: *f.nonvoter}
	}
	if inv != nil {
		if inv.chain != d.chain {
			return node.Config{}, nil, fmt.Errorf("the invite is for chain %s, but %s serves %s", inv.chain, d.dir, d.chain)
		}
		if !bytes.Equal(d.psk, inv.psk) {
			return node.Config{}, nil, fmt.Errorf("the invite's network key differs from %s", filepath.Join(d.dir, networkKeyFile))
		}
		if fresh && inv.expired(time.Now()) {
			return node.Config{}, nil, fmt.Errorf("the invite expired at %s: ask a running device for a new one (`baton invite`)", inv.exp.Format(time.RFC3339))
		}
		cfg.Join = &node.JoinConfig{Seeds: inv.addrs, Token: inv.token, NonVoter: *f.nonvoter}
	}
	if cfg.Join != nil && d.first && fresh {
		return node.Config{}, nil, usagef("this device founded its chain (init --new-chain); it bootstraps and cannot join another cluster")
	}
	if cfg.Join != nil {
		cfg.Bootstrap = false
	}
	if fresh && !cfg.Bootstrap && cfg.Join == nil {
		return node.Config{}, nil, usagef("%s has no Raft state: it never joined a cluster, or its raft.db was lost. "+
			"Join with an invite from a running device (`baton invite` there, `baton join --invite-file F` here); a device that lost raft.db re-joins the same way", d.dir)
	}
	return cfg, d, nil
}

func (c *cli) runNode(ctx context.Context, f *runFlags, inv *invite) error {
	cfg, _, err := c.nodeConfig(f, inv)
	if err != nil {
		return err
	}
	acfg := api.Config{Socket: filepath.Join(cfg.DataDir, api.SocketFile), Addr: *f.apiAddr, Logger: cfg.Logger}
	if acfg.Addr != "" {
		path := *f.apiTokenFile
		if path == "" {
			path = filepath.Join(cfg.DataDir, apiTokenFile)
		}
		tok, created, err := serverToken(path)
		if err != nil {
			return fmt.Errorf("api token: %w", err)
		}
		if created {
			cfg.Logger.Info("made a bearer token for the TCP API", "file", path)
		}
		acfg.Token = tok
	} else if *f.apiTokenFile != "" {
		return usagef("--api-token-file goes with --api-addr")
	}
	if err := acfg.Validate(); err != nil {
		return usagef("--api-addr: %v", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return err
	}
	srv, err := api.Start(n, acfg)
	if err != nil {
		_ = n.Stop(context.Background())
		return err
	}
	cfg.Logger.Info("baton running", "id", n.ID(), "chain", n.Chain(), "addrs", strings.Join(n.Addrs(), ","),
		"api", srv.Socket(), "signer", cfg.ChainKey != nil, "version", version())
	<-ctx.Done()
	cfg.Logger.Info("stopping: releasing the lease if held (signal again to abort)")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Close(stopCtx)
	if err := n.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}

func newLogger(c *cli, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(c.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(c.stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// decodeToken accepts a join token in base64url (as invites carry it) or hex.
func decodeToken(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("required with --join ADDRS (or pass an invite to --join)")
	}
	if b, err := hex.DecodeString(s); err == nil && len(b) > 0 {
		return b, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(b) == 0 {
		return nil, errors.New("not base64url or hex")
	}
	return b, nil
}
