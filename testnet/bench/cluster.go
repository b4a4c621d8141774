package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// Cluster is three baton devices (node.Node) in this process over real libp2p on
// 127.0.0.1 with their data dirs under one directory. Devices can be killed and
// restarted on the same data dir and port.
type Cluster struct {
	Nodes []*node.Node
	apis  []*api.Server
	cfgs  []node.Config
	ttl   time.Duration
}

// start starts a node with cfg and its API on the socket in its data dir.
func start(ctx context.Context, cfg node.Config) (*node.Node, *api.Server, error) {
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	srv, err := api.Start(n, api.Config{Socket: filepath.Join(cfg.DataDir, api.SocketFile), Logger: cfg.Logger})
	if err != nil {
		_ = n.Kill()
		return nil, nil, err
	}
	return n, srv, nil
}

// ClusterConfig configures StartCluster.
type ClusterConfig struct {
	Dir       string
	TTL, Tick time.Duration
	// Raft adjusts each device's raft.Config (nil: baton's defaults).
	Raft   func(*raft.Config)
	Logger *slog.Logger // nil: discard
}

// StartCluster starts a bootstrap device and joins two more through a join window,
// then waits (bounded by ctx) until one of them holds the lease.
func StartCluster(ctx context.Context, cc ClusterConfig) (*Cluster, error) {
	psk, err := transport.GeneratePSK()
	if err != nil {
		return nil, err
	}
	key, err := chain.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if cc.Logger == nil {
		cc.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{ttl: cmp.Or(cc.TTL, node.DefaultNodeTTL)}
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	for i := range 3 {
		cfg := node.Config{
			DataDir:     filepath.Join(cc.Dir, fmt.Sprint("dev", i)),
			ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
			PSK:         psk,
			ChainKey:    key,
			TTL:         cc.TTL,
			Tick:        cc.Tick,
			Logger:      cc.Logger.With("dev", i),
			Raft:        cc.Raft,
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = &node.JoinConfig{Seeds: c.Nodes[0].Addrs(), Token: token}
		}
		n, srv, err := start(ctx, cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("start device %d: %w", i, err)
		}
		c.apis = append(c.apis, srv)
		if i == 0 {
			n.AllowJoins(token, time.Now().Add(time.Hour), 2)
		}
		// Restarts reuse the port: the others' address books hold it.
		cfg.ListenAddrs = []string{listenAddr(n.Addrs())}
		cfg.Bootstrap, cfg.Join = false, nil
		c.Nodes = append(c.Nodes, n)
		c.cfgs = append(c.cfgs, cfg)
	}
	if _, err := c.WaitHolder(ctx, ""); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// listenAddr strips /p2p/... from the first 127.0.0.1 address.
func listenAddr(addrs []string) string {
	for _, a := range addrs {
		if strings.HasPrefix(a, "/ip4/127.0.0.1/") {
			if i := strings.Index(a, "/p2p/"); i >= 0 {
				return a[:i]
			}
			return a
		}
	}
	return "/ip4/127.0.0.1/tcp/0"
}

// Holder returns the index of a live device whose replica names it holder and which
// holds the lease, or -1.
func (c *Cluster) Holder() int {
	for i, n := range c.Nodes {
		if n != nil && n.Holds() {
			return i
		}
	}
	return -1
}

// Leader returns the index of the live device that is the Raft leader, or -1.
func (c *Cluster) Leader() int {
	for i, n := range c.Nodes {
		if n != nil && n.Log().Raft().State() == raft.Leader {
			return i
		}
	}
	return -1
}

// WaitHolder waits until a device other than not ("" for any) holds the lease.
func (c *Cluster) WaitHolder(ctx context.Context, not string) (int, error) {
	h := -1
	err := poll(ctx, func() bool {
		h = c.Holder()
		return h >= 0 && c.Nodes[h].ID() != not
	})
	if err != nil {
		return -1, fmt.Errorf("no lease holder: %w", err)
	}
	return h, nil
}

// Arrange moves the lease so that the holder is (leader=true) or is not the Raft
// leader, and returns the holder's index.
func (c *Cluster) Arrange(ctx context.Context, leader bool) (int, error) {
	for attempt := 0; attempt < 10; attempt++ {
		h, err := c.WaitHolder(ctx, "")
		if err != nil {
			return -1, err
		}
		var l int
		if err := poll(ctx, func() bool { l = c.Leader(); return l >= 0 }); err != nil {
			return -1, fmt.Errorf("no raft leader: %w", err)
		}
		if (h == l) == leader {
			return h, nil
		}
		to := l
		if !leader {
			to = (l + 1) % len(c.Nodes)
			if to == h || c.Nodes[to] == nil {
				to = (l + 2) % len(c.Nodes)
			}
		}
		if c.Nodes[to] == nil {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = c.Nodes[h].Transfer(tctx, c.Nodes[to].ID())
		if err == nil {
			err = poll(tctx, func() bool { return c.Nodes[to].Holds() })
		}
		cancel()
		if err != nil && ctx.Err() != nil {
			return -1, err
		}
	}
	return -1, errors.New("could not arrange holder and leader")
}

// Kill hard-stops device i (no release).
func (c *Cluster) Kill(i int) error {
	n := c.Nodes[i]
	c.Nodes[i] = nil
	c.apis[i].Close(nil)
	return n.Kill()
}

// Restart starts device i again on its data dir and port.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	var n *node.Node
	var srv *api.Server
	// The port may linger for a moment after a kill: retry briefly.
	err := poll(ctx, func() bool {
		var err error
		n, srv, err = start(ctx, c.cfgs[i])
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("restart device %d: %w", i, err)
	}
	c.Nodes[i], c.apis[i] = n, srv
	return nil
}

// Submit submits one intent on device i.
func (c *Cluster) Submit(ctx context.Context, i int, id string, value []byte, wait node.Wait) (node.SubmitResult, error) {
	return c.Nodes[i].Submit(ctx, intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "bench/" + id, Value: value}, wait)
}

// DataDirs are the devices' data directories.
func (c *Cluster) DataDirs() []string {
	var ds []string
	for _, cfg := range c.cfgs {
		ds = append(ds, cfg.DataDir)
	}
	return ds
}

// Socket is device i's API socket path.
func (c *Cluster) Socket(i int) string { return filepath.Join(c.cfgs[i].DataDir, api.SocketFile) }

// Close stops every live device gracefully.
func (c *Cluster) Close() {
	for i, n := range c.Nodes {
		if n != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.apis[i].Close(ctx)
			_ = n.Stop(ctx)
			cancel()
			c.Nodes[i] = nil
		}
	}
}
