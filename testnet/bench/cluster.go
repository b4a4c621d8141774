package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// startCluster starts three baton devices in this process (testnet.Cluster) with
// their local API on each data dir's socket, and waits (bounded by ctx) until one of
// them holds the lease. It records no timeline: sampling every device's state would
// cost the figures being measured.
func startCluster(ctx context.Context, dir string, ttl, tick time.Duration, logger *slog.Logger) (*testnet.Cluster, error) {
	c, err := testnet.NewCluster(testnet.Config{Nodes: 3, Dir: dir, TTL: ttl, Tick: tick, Raft: clusterRaft,
		RaftTimeout: clusterRaftTimeout, API: true, Logger: logger, SampleEvery: -1})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if _, _, err := c.WaitHolder(ctx, 0); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// submit submits one intent on device d.
func submit(ctx context.Context, d *testnet.Device, id string, value []byte, wait node.Wait) (node.SubmitResult, error) {
	n := d.Node()
	if n == nil {
		return node.SubmitResult{}, fmt.Errorf("%s is down", d.Label())
	}
	return n.Submit(ctx, intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "bench/" + id, Value: value}, wait)
}

// arrange moves the lease so that the holder is (leader=true) or is not the Raft
// leader, and returns the holder.
func arrange(ctx context.Context, c *testnet.Cluster, leader bool) (*testnet.Device, error) {
	ds := c.Devices()
	for attempt := 0; attempt < 10; attempt++ {
		h, _, err := c.WaitHolder(ctx, 0)
		if err != nil {
			return nil, err
		}
		l, err := c.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		if (h == l) == leader {
			return h, nil
		}
		to := l
		if !leader {
			to = ds[(l.Index+1)%len(ds)]
			if to == h || to.Node() == nil {
				to = ds[(l.Index+2)%len(ds)]
			}
		}
		if to.Node() == nil || h.Node() == nil {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = h.Node().Transfer(tctx, to.ID())
		if err == nil {
			err = wait.Until(tctx, to.Label()+" to hold the lease", func() bool { n := to.Node(); return n != nil && n.Holds() })
		}
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, errors.New("could not arrange holder and leader")
}

// diskBytes is the size of the devices' data dirs.
func diskBytes(c *testnet.Cluster) int64 {
	var n int64
	for _, d := range c.Devices() {
		n += dirBytes(d.Dir)
	}
	return n
}
