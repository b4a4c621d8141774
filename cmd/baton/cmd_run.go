package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/acme"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

const runLong = `Runs this device's node in the foreground until SIGINT/SIGTERM: the libp2p host, the
Raft intent log, the lease, the signer loop (when this device holds the chain key) and
the local API on DIR/baton.sock. Logs go to stderr. The first signal stops gracefully
(a held lease is released, so another device takes over at once); a second aborts.
When this device leaves the cluster (` + "`baton leave`" + `) or another member removes it, the
node stops and the command exits with a message saying so; a data dir that left does
not run again.

The device made with ` + "`init --new-chain`" + ` bootstraps the cluster on its first run.
Others join once, with ` + "`baton join --invite-file F`" + `; after that a plain ` + "`baton run`" + `
restarts them. Keep a device's --listen addresses stable across restarts: the other
members remember them. Invites and members get the addresses others can dial: the
listen addresses without loopback (unless listening on loopback only) and link-local
ones, or only --advertise's (a router's forwarded port, a DNS name) when given.
--metrics-addr serves only GET /metrics and GET /healthz (for
Prometheus), never the API. On an atproto chain, --xrpc-addr serves the repository's
read-only XRPC methods (com.atproto.sync.getRepo, getRecord, getLatestCommit,
listRepos, getRepoStatus, getBlocks, subscribeRepos, com.atproto.repo.getRecord,
listRecords, describeRepo, com.atproto.server.describeServer) to anyone,
without a token, so that a relay can crawl it; nothing else (every other path is 404),
with the TCP API's connection limits on a listener of its own. It is refused on a chain
in baton's own format.`

const runExample = `  baton run --data ~/.baton
  baton run --data /tmp/b1 --listen /ip4/127.0.0.1/tcp/7401 --ttl 5s --tick 500ms
  baton run --data /tmp/b1 --metrics-addr 127.0.0.1:9420
  baton run --data /tmp/a1 --xrpc-addr 0.0.0.0:2583    # an atproto chain, public read-only`

const joinLong = `Runs the node like ` + "`baton run`" + `, joining the cluster of an invite (from ` + "`baton invite`" + ` on
a running device) on the first start. If the data dir is not initialized yet, it is
initialized from the invite first. If the join fails (the invite expired, was refused
or already used, or the cluster cannot be reached within --join-timeout), everything
this command wrote in the data dir is removed again: no keys stay behind. On later
starts the invite is not needed (and may have expired): ` + "`baton run`" + ` restarts the device.

Read the invite from a file or stdin: an invite passed as an argument is visible to
other users of the machine (it still works, with a warning).`

const joinExample = `  baton join --data /tmp/b2 --listen /ip4/127.0.0.1/tcp/7402 --invite-file invite.txt
  ssh b1 baton invite --with-chain-key | baton join --invite-file -`

// runFlags are the flags of run and join.
type runFlags struct {
	data         *string
	listen       *string
	advertise    *string
	apiAddr      *string
	apiTokenFile *string
	xrpcAddr     *string
	metricsAddr  *string
	pprofAddr    *string
	ttl          *time.Duration
	tick         *time.Duration
	bootstrap    *bool
	newHistory   *bool
	join         *string
	joinToken    *string
	inviteFile   *string
	joinTimeout  *time.Duration
	nonvoter     *bool
	markFile     *string
	name         *string
	settings     *string
	fs           *pflag.FlagSet // for a reload: which settings were given how
	crawl        *string
	publicHost   *string
	apiTLSCert   *string
	apiTLSKey    *string
	xrpcTLSCert  *string
	xrpcTLSKey   *string
	acme         *bool
	acmeCA       *string
	acmeCARoot   *string
	acmeEmail    *string
	acmeHTTPAddr *string
	raftTimeout  *time.Duration
	logLevel     *string
	logFormat    *string
	raftLogLevel *string
}

func addRunFlags(fs *pflag.FlagSet, join bool) *runFlags {
	f := &runFlags{
		fs:           fs,
		data:         dataFlag(fs),
		listen:       fs.String("listen", strings.Join(transport.DefaultListenAddrs, ","), "libp2p TCP listen `multiaddrs`, comma-separated"),
		advertise:    fs.String("advertise", "", "publish only these TCP `multiaddrs` (comma-separated, e.g. a router's forwarded port /ip4/203.0.113.7/tcp/7420) in invites and to members, instead of the listen addresses"),
		apiAddr:      fs.String("api-addr", "", "also serve the API on this TCP `host:port` (always with a bearer token)"),
		apiTokenFile: fs.String("api-token-file", "", "the TCP API's bearer token `file` (default DIR/api.token, created 0600 when missing)"),
		apiTLSCert:   fs.String("api-tls-cert", "", "serve the TCP API over HTTPS with this PEM certificate (chain) `file` (needed when --api-addr is not loopback; reread when it changes)"),
		apiTLSKey:    fs.String("api-tls-key", "", "the PEM private key `file` of --api-tls-cert"),
		xrpcTLSCert:  fs.String("xrpc-tls-cert", "", "serve --xrpc-addr over HTTPS with this PEM certificate (chain) `file` for --public-host (relays crawl only TLS hosts; reread when it changes)"),
		xrpcTLSKey:   fs.String("xrpc-tls-key", "", "the PEM private key `file` of --xrpc-tls-cert"),
		xrpcAddr:     fs.String("xrpc-addr", "", "atproto chains: serve the repository's read-only XRPC methods publicly (no token, nothing else) on this TCP `host:port`"),
		crawl:        fs.String("crawl", "", "with --xrpc-addr: relays to tell about the repository, comma-separated base `URLs` (https://relay.example); asked to crawl at start and again while one reports the host offline (needs --public-host)"),
		publicHost:   fs.String("public-host", "", "the `name` relays crawl this repository at (its DID document's PDS host, pds.example.com: no scheme, no port; TLS by --acme, --xrpc-tls-cert or a proxy in front)"),
		acme:         fs.Bool("acme", false, "serve --xrpc-addr over HTTPS with a certificate for --public-host got and renewed by ACME (Let's Encrypt unless --acme-ca); every device serving the name gets its own, and any of them answers the CA's HTTP challenge (on --acme-http-addr) for the others"),
		acmeCA:       fs.String("acme-ca", "", "with --acme: the ACME directory `URL` (default Let's Encrypt's)"),
		acmeCARoot:   fs.String("acme-ca-root", "", "with --acme: a PEM `file` of roots to trust, besides the system's, for --acme-ca's HTTPS (a private CA)"),
		acmeEmail:    fs.String("acme-email", "", "with --acme: the ACME account's contact `address`"),
		acmeHTTPAddr: fs.String("acme-http-addr", ":80", "with --acme: the `host:port` answering the CA's HTTP challenges (port 80 of the name: forward it here) and redirecting other requests to https"),
		metricsAddr:  fs.String("metrics-addr", "", "serve only GET /metrics and /healthz on this TCP `host:port` (for Prometheus)"),
		pprofAddr:    fs.String("pprof-addr", "", "serve Go's profiles (/debug/pprof/) on this loopback `host:port` (debugging; unauthenticated)"),
		ttl:          fs.Duration("ttl", node.DefaultNodeTTL, "lease TTL of this device's claims (at most 1/16 of the chain's dedupe retention: 90m at the default 24h)"),
		tick:         fs.Duration("tick", node.DefaultNodeTick, "signer loop tick (lease renewal cadence)"),
		bootstrap:    fs.Bool("bootstrap", false, "bootstrap a new cluster on first start (implied for the device made with init --new-chain)"),
		newHistory:   fs.Bool("start-second-history", false, "with --bootstrap, allow a chain key that already has a history (chain.genesis) to start another one: readers of the first see a fork"),
		nonvoter:     fs.Bool("nonvoter", false, "join as a non-voter (a replica that does not count for quorum)"),
		settings:     fs.String("settings", "", "the BATON_<FLAG>=value `file` a reload (SIGHUP, systemctl reload) reads again: it applies the log levels and logs the settings that take effect at the next start"),
		name:         fs.String("name", "", "this device's human `name`, shown by the members beside its ID (status, members, logs, metrics): letters, digits, . _ - (default: the host's name)"),
		markFile:     fs.String("mark-file", "", "the `file` outside the data dir that keeps the highest Raft term and applied index this device reached, so a restored older copy is fenced until it caught up (default DIR.mark; - for none)"),
		joinTimeout:  fs.Duration("join-timeout", time.Minute, "how long a first start waits for the cluster to admit this device"),
		raftTimeout:  fs.Duration("raft-timeout", 0, "Raft heartbeat and election timeout (0: TTL/5 within 1s-5s, which keeps an idle leader's CPU low); lower for tests"),
		logLevel:     fs.String("log-level", "info", "log `level`: debug, info, warn, error"),
		logFormat:    fs.String("log-format", "text", "log `format`: text or json"),
		raftLogLevel: fs.String("raft-log-level", "warn", "least `level` of Raft's own messages: debug, info, warn, error"),
	}
	if join {
		f.inviteFile = fs.String("invite-file", "", "read the invite from `FILE` (- for stdin)")
		empty := ""
		f.join, f.joinToken = &empty, &empty
	} else {
		f.join = fs.String("join", "", "join a cluster on first start: member p2p `multiaddrs` (comma-separated, with --join-token)")
		f.joinToken = fs.String("join-token", "", "the join window's token (base64url or hex) when --join gives addresses")
		empty := ""
		f.inviteFile = &empty
	}
	return f
}

func (c *cli) runCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "run [flags]", Short: "run the node in the foreground", Long: runLong, Example: runExample, Args: noArgs}
	f := addRunFlags(cmd.Flags(), false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var inv *device.Invite
		if device.LooksLikeInvite(*f.join) {
			var err error
			if inv, err = c.readInviteArg("", []string{*f.join}); err != nil {
				return err
			}
		}
		return c.runNode(cmd.Context(), f, inv)
	}
	return cmd
}

func (c *cli) joinCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "join --invite-file FILE|- [run flags]", Short: "run the node, joining a cluster with an invite on first start",
		Long: joinLong, Example: joinExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("want one invite at most, got %d arguments", len(args))
			}
			return nil
		}}
	f := addRunFlags(cmd.Flags(), true)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		inv, err := c.readInviteArg(*f.inviteFile, args)
		if err != nil {
			return err
		}
		return c.runNode(cmd.Context(), f, inv)
	}
	return cmd
}

// exitRemoved is the exit status of run and join on a device another member removed
// (now, or before this start): a service manager must not restart it
// (deploy/systemd: RestartPreventExitStatus=3).
const exitRemoved = 3

// exitClone is the exit status of run and join on a process that members found to be
// a second, later-started process with a running device's identity (a copied data
// dir or a cloned machine): it stops, and must not be restarted as that device.
const exitClone = 4

// startPlan is what runNode needs to start a device.
type startPlan struct {
	cfg     node.Config
	dev     *device.Device
	attempt *device.Attempt // set on a first join: undo it if the start fails
	logs    *logState
}

// prepare validates the flags and builds the device's config; nothing is written
// before every usage check passed.
func (c *cli) prepare(f *runFlags, inv *device.Invite) (*startPlan, error) {
	if *f.ttl <= 0 || *f.tick <= 0 {
		return nil, usagef("--ttl and --tick must be positive")
	}
	if *f.tick >= *f.ttl {
		return nil, usagef("--tick (%s) must be well below --ttl (%s)", *f.tick, *f.ttl)
	}
	if *f.joinTimeout <= 0 {
		return nil, usagef("--join-timeout must be positive")
	}
	if *f.name != "" {
		if err := node.ValidName(*f.name); err != nil {
			return nil, usagef("--name: %v", api.Message(err))
		}
	}
	listen := splitList(*f.listen)
	if len(listen) == 0 {
		return nil, usagef("--listen is empty")
	}
	advertise := splitList(*f.advertise)
	logger, logs, err := newLogger(c, *f.logLevel, *f.logFormat)
	if err != nil {
		return nil, err
	}
	raftLevel, err := parseLevel("--raft-log-level", *f.raftLogLevel)
	if err != nil {
		return nil, err
	}
	var seeds []string
	var token []byte
	if *f.join != "" && inv == nil {
		if token, err = decodeToken(*f.joinToken); err != nil {
			return nil, usagef("--join-token: %v", err)
		}
		seeds = splitList(*f.join)
		if _, err := transport.ParseSeeds(seeds); err != nil {
			return nil, usagef("--join: %v", err)
		}
	}
	if r, ok, _ := device.ReadRemoved(*f.data); ok {
		return nil, &exitError{code: exitRemoved, msg: api.Message(device.RemovedError(*f.data, r))}
	}
	s := &startPlan{logs: logs}
	if inv != nil {
		if s.dev, s.cfg, s.attempt, err = device.PrepareJoin(*f.data, inv, *f.nonvoter, time.Now()); err != nil {
			return nil, err
		}
		if s.cfg.Join == nil {
			s.attempt = nil // it joined before: nothing of this start is to be undone
		}
	} else {
		if s.dev, err = device.Open(*f.data); err != nil {
			return nil, err
		}
		s.cfg = s.dev.Config()
		has, err := s.dev.HasState()
		if err != nil {
			return nil, err
		}
		switch {
		case seeds != nil && !has && s.dev.Founder:
			return nil, usagef("this device founded its chain (init --new-chain); it bootstraps and cannot join another cluster")
		case seeds != nil && !has:
			s.cfg.Bootstrap = false
			s.cfg.Join = &node.JoinConfig{Seeds: seeds, Token: token, NonVoter: *f.nonvoter}
		case !has && !s.cfg.Bootstrap && !*f.bootstrap:
			return nil, usagef("%s has no Raft state: it never joined a cluster, or its raft.db was lost. "+
				"Join with an invite from a running device (`baton invite` there, `baton join --invite-file F` here); a device that lost raft.db re-joins the same way", s.dev.Dir)
		}
		if *f.bootstrap && s.cfg.Join == nil {
			s.cfg.Bootstrap = true
		}
	}
	s.cfg.ListenAddrs = listen
	s.cfg.AdvertiseAddrs = advertise
	s.cfg.NewHistory = *f.newHistory
	s.cfg.MarkFile = *f.markFile
	s.cfg.TTL, s.cfg.Tick = *f.ttl, *f.tick
	s.cfg.Logger = logger
	s.cfg.RaftLogLevel = &logs.raftLevel
	s.cfg.Name = cmp.Or(*f.name, node.DefaultName())
	if rt := *f.raftTimeout; rt > 0 {
		s.cfg.Raft = func(rc *raft.Config) {
			rc.HeartbeatTimeout = rt
			rc.ElectionTimeout = rt
			rc.LeaderLeaseTimeout = rt / 2
		}
	}
	logs.setSelf(s.dev.ID.String())
	logs.raftLevel.Set(raftLevel)
	return s, nil
}

func (c *cli) runNode(ctx context.Context, f *runFlags, inv *device.Invite) (err error) {
	acfg := api.Config{Addr: *f.apiAddr, XRPCAddr: *f.xrpcAddr}
	if acfg.Addr == "" && *f.apiTokenFile != "" {
		return usagef("--api-token-file goes with --api-addr")
	}
	if (*f.apiTLSCert == "") != (*f.apiTLSKey == "") {
		return usagef("--api-tls-cert and --api-tls-key go together")
	}
	if *f.apiTLSCert != "" {
		if acfg.Addr == "" {
			return usagef("--api-tls-cert goes with --api-addr")
		}
		tc, err := api.TLSFromFiles(*f.apiTLSCert, *f.apiTLSKey)
		if err != nil {
			return usagef("--api-tls-cert: %v", api.Message(err))
		}
		acfg.TLS = tc
	}
	acfg.PublicHost = *f.publicHost
	acmeFlags, err := acmeConfig(f)
	if err != nil {
		return err
	}
	if (*f.xrpcTLSCert == "") != (*f.xrpcTLSKey == "") {
		return usagef("--xrpc-tls-cert and --xrpc-tls-key go together")
	}
	if *f.xrpcTLSCert != "" {
		if *f.xrpcAddr == "" {
			return usagef("--xrpc-tls-cert goes with --xrpc-addr")
		}
		tc, err := api.TLSFromFiles(*f.xrpcTLSCert, *f.xrpcTLSKey)
		if err != nil {
			return usagef("--xrpc-tls-cert: %v", api.Message(err))
		}
		acfg.XRPCTLS, acfg.XRPCCertificate = tc, api.LeafOfFiles(tc)
	}
	if *f.apiAddr != "" {
		if err := (&api.Config{Socket: "x", Addr: *f.apiAddr, Token: strings.Repeat("x", api.MinTokenLen), TLS: acfg.TLS}).Validate(); err != nil {
			return usagef("--api-addr: %v", api.Message(err))
		}
	}
	if *f.xrpcAddr != "" {
		if err := (&api.Config{XRPCAddr: *f.xrpcAddr}).Validate(); err != nil {
			return usagef("--xrpc-addr: %v", api.Message(err))
		}
	}
	if *f.crawl != "" || *f.publicHost != "" {
		switch {
		case *f.xrpcAddr == "":
			return usagef("--crawl and --public-host go with --xrpc-addr (the repository relays crawl)")
		case *f.publicHost == "":
			return usagef("--crawl and --public-host go together")
		case *f.crawl == "" && !*f.acme:
			return usagef("--crawl and --public-host go together (or --public-host with --acme)")
		}
		if *f.crawl != "" {
			if err := api.ValidateCrawl(splitList(*f.crawl), *f.publicHost); err != nil {
				return usagef("--crawl: %v", api.Message(err))
			}
			acfg.Crawl = &api.CrawlConfig{Relays: splitList(*f.crawl), Hostname: *f.publicHost}
		}
	}
	s, err := c.prepare(f, inv)
	if err != nil {
		return err
	}
	cfg, logger := s.cfg, s.cfg.Logger
	undo := func() {
		if s.attempt != nil {
			if uerr := s.attempt.Undo(); uerr != nil {
				logger.Warn("could not remove what the failed join wrote", "dir", cfg.DataDir, "err", uerr)
			}
		}
	}
	if acfg.XRPCAddr != "" {
		// Before anything starts (a first join included): the chain's key says its format.
		if err := api.CheckXRPCChain(cfg.Chain); err != nil {
			undo()
			return usagef("--xrpc-addr: %v", api.Message(err))
		}
	}
	acfg.Socket = filepath.Join(cfg.DataDir, api.SocketFile)
	acfg.Logger = logger
	if acfg.Addr != "" {
		path := *f.apiTokenFile
		if path == "" {
			path = filepath.Join(cfg.DataDir, apiTokenFile)
		}
		tok, created, err := serverToken(path)
		if err != nil {
			undo()
			return fmt.Errorf("api token: %w", err)
		}
		if created {
			logger.Info("made a bearer token for the TCP API", "file", path)
		}
		acfg.Token = tok
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		undo()
		return err
	}
	defer unlock()
	if acmeFlags != nil {
		// After the lock (one process per data dir orders its certificate), before
		// the node: a port already taken fails the start at once.
		acmeFlags.AccountSeed = cfg.PSK[:]
		acmeFlags.Dir = filepath.Join(cfg.DataDir, acmeDir)
		acmeFlags.Logger = logger
		m, err := acme.Start(*acmeFlags)
		if err != nil {
			unlock()
			undo()
			return fmt.Errorf("--acme: %w", err)
		}
		defer m.Close()
		acfg.XRPCTLS, acfg.XRPCCertificate = m.TLSConfig(), m.Leaf
		logger.Info("getting the public listener's certificate by ACME", "host", acmeFlags.Host, "ca", cmp.Or(acmeFlags.CA, acme.LetsEncrypt), "challenges", m.HTTPAddr())
	}
	startCtx := ctx
	if cfg.Join != nil {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithTimeout(ctx, *f.joinTimeout)
		defer cancel()
	}
	n, err := node.Start(startCtx, cfg)
	if err != nil {
		unlock()
		undo()
		return startError(err, f, cfg, ctx)
	}
	srv, err := api.Start(n, acfg)
	if err != nil {
		_ = n.Kill()
		unlock()
		undo()
		return err
	}
	var ms *api.MetricsServer
	if *f.metricsAddr != "" {
		if ms, err = api.ServeMetrics(n, *f.metricsAddr, logger); err != nil {
			srv.Close(nil)
			_ = n.Kill()
			unlock()
			undo()
			return fmt.Errorf("--metrics-addr: %s", api.Message(err))
		}
	}
	if *f.pprofAddr != "" {
		paddr, closePprof, err := servePprof(*f.pprofAddr, logger)
		if err != nil {
			if ms != nil {
				ms.Close()
			}
			srv.Close(nil)
			_ = n.Kill()
			unlock()
			undo()
			return err
		}
		defer closePprof()
		logger.Info("profiles served", "pprof", "http://"+paddr+"/debug/pprof/")
	}
	attrs := []any{"chain", n.Chain(), "addrs", strings.Join(n.Addrs(), ","), "api_socket", srv.Socket()}
	if srv.Addr() != "" {
		attrs = append(attrs, "api_tcp", srv.Addr())
	}
	if srv.XRPCAddr() != "" {
		attrs = append(attrs, "xrpc_public", srv.XRPCAddr())
	}
	if ms != nil {
		attrs = append(attrs, "metrics", "http://"+ms.Addr()+"/metrics")
	}
	logger.Info("baton running", append(attrs, "node", n.ID(), "signer", cfg.ChainKey != nil, "version", version())...)
	if s.dev.Replica {
		logger.Info("this device is a replica: it was made without the chain key (device.json) and never signs; if it should sign, stop it and put the chain key back in chain.key (from a backup or another signer)")
	}
	go notifyReady(ctx, n, logger)                            // systemd's Type=notify (sdnotify.go)
	go reloadOnHangup(ctx, *f.settings, f.fs, s.logs, logger) // reload.go
	go func() {
		// Until this device first sees a leader, "no leader" warnings are expected; so
		// are those of calls that started before it (they end within a tick).
		if wait.Until(ctx, "a raft leader", func() bool { return n.State().Raft.Leader != "" }) != nil {
			return
		}
		t := time.NewTimer(cfg.Tick + cfg.Tick/2)
		defer t.Stop()
		select {
		case <-t.C:
			s.logs.formed.Store(true)
		case <-ctx.Done():
		}
	}()
	var removed error
	select {
	case <-ctx.Done():
		logger.Info("stopping: releasing the lease if held (signal again to abort)")
	case <-n.Removed():
		how, at, _ := n.RemovedHow()
		r := device.Removal{At: at, How: how}
		if err := device.MarkRemoved(cfg.DataDir, r); err != nil {
			logger.Warn("could not record the removal in the data dir", "err", err)
		}
		removed = &exitError{code: exitRemoved, msg: api.Message(device.RemovedError(cfg.DataDir, r))}
		if how == "left" {
			removed = &exitError{code: 0, msg: fmt.Sprintf("this device left the cluster; the node stopped. %s no longer runs; to take part again, join with a new data dir", cfg.DataDir)}
		}
		logger.Info("stopping: this device is no longer a member")
	case <-n.Cloned():
		removed = &exitError{code: exitClone, msg: api.Message(n.CloneError())}
		logger.Error("stopping: another process runs with this device's identity", "err", n.CloneError())
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms.Close()
	srv.Close(stopCtx)
	if err := n.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return removed
}

// startError explains why the node did not start, in one line.
func startError(err error, f *runFlags, cfg node.Config, ctx context.Context) error {
	switch {
	case errors.Is(err, transport.ErrBadAdvertise):
		return fmt.Errorf("--advertise %s: %s", *f.advertise, api.Message(err))
	case errors.Is(err, transport.ErrAddrInUse):
		return fmt.Errorf("--listen %s: the address is already in use (another baton device or another program listens there): give this device its own port", *f.listen)
	case errors.Is(err, transport.ErrBadToken):
		why := "expired, already used, or its join window closed when the inviting node restarted"
		if _, after, ok := strings.Cut(err.Error(), transport.ErrBadToken.Error()+": "); ok {
			why = after // the inviting device says which
		}
		return fmt.Errorf("the cluster refused the invite (%s): ask a running device for a new one (`baton invite`); nothing was kept in %s", why, cfg.DataDir)
	case cfg.Join != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrTimeout) || errors.Is(err, transport.ErrNoLeader)):
		return fmt.Errorf("could not join within --join-timeout %s (are the invite's members running and reachable?): %s; nothing was kept in %s", *f.joinTimeout, api.Message(err), cfg.DataDir)
	case errors.Is(err, transport.ErrHandshake) || errors.Is(err, transport.ErrUnreachable):
		return fmt.Errorf("could not reach the cluster: %s", api.Message(err))
	}
	return errors.New(api.Message(err))
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
		return nil, errors.New("required with --join ADDRS")
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

// acmeDir, in the data dir, keeps the ACME account and the certificates.
const acmeDir = "acme"

// acmeConfig checks the --acme flags: nil without --acme. The seed, directory and
// logger are the caller's.
func acmeConfig(f *runFlags) (*acme.Config, error) {
	if !*f.acme {
		for _, name := range []string{"acme-ca", "acme-ca-root", "acme-email", "acme-http-addr"} {
			if f.fs.Changed(name) {
				return nil, usagef("--%s goes with --acme", name)
			}
		}
		return nil, nil
	}
	switch {
	case *f.xrpcAddr == "" || *f.publicHost == "":
		return nil, usagef("--acme goes with --xrpc-addr and --public-host (the name to get a certificate for)")
	case *f.xrpcTLSCert != "":
		return nil, usagef("--acme and --xrpc-tls-cert are two sources of one certificate: give one")
	}
	c := &acme.Config{Host: *f.publicHost, CA: *f.acmeCA, Email: *f.acmeEmail, HTTPAddr: *f.acmeHTTPAddr}
	if *f.acmeCARoot != "" {
		b, err := os.ReadFile(*f.acmeCARoot)
		if err != nil {
			return nil, usagef("--acme-ca-root: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, usagef("--acme-ca-root %s: no PEM certificate in it", *f.acmeCARoot)
		}
		c.Roots = pool
	}
	probe := *c
	probe.AccountSeed, probe.Dir = make([]byte, 32), "x" // the caller's, checked here for their shape only
	if err := probe.Validate(); err != nil {
		return nil, usagef("--acme: %v", err)
	}
	return c, nil
}
