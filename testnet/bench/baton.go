package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/testnet"
)

// clusterRaftTimeout is clusterRaft's heartbeat and election timeout.
const clusterRaftTimeout = 500 * time.Millisecond

// clusterRaft tunes baton's Raft for a LAN (three devices on one machine here): a
// quicker failure detector than raft.DefaultConfig's 1 s, still several heartbeat
// rounds (HeartbeatTimeout/10) above a loaded machine's scheduling delays.
func clusterRaft(c *raft.Config) {
	c.HeartbeatTimeout = clusterRaftTimeout
	c.ElectionTimeout = clusterRaftTimeout
	c.LeaderLeaseTimeout = clusterRaftTimeout / 2
}

// runBaton starts a baton cluster and measures its sections (load, failover, at
// rest) on it.
func runBaton(ctx context.Context, o Options, dir string, r *Report, fail func(string, error)) {
	if o.Skip[SectionStages] && o.Skip[SectionLoad] && o.Skip[SectionFailover] && o.Skip[SectionRest] {
		return
	}
	o.progress("baton: starting three devices")
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	c, err := startCluster(sctx, filepath.Join(dir, "baton"), o.TTL, o.Tick, nil)
	cancel()
	if err != nil {
		fail("baton", err)
		return
	}
	defer c.Close()
	section := func(name string, f func(context.Context, Options, *testnet.Cluster, *Report) error, limit time.Duration) {
		if o.Skip[name] {
			return
		}
		o.progress("%s", name)
		sctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		fail(name, f(sctx, o, c, r))
	}
	section(SectionStages, runStages, time.Duration(o.StageRounds)*time.Second+time.Minute)
	loads := time.Duration(2*2*len(o.Clients)+1)*o.LoadWindow + 2*time.Minute
	section(SectionLoad, profiled(o, "load.pprof", runLoads), loads)
	section(SectionFailover, runFailover, time.Duration(o.Rounds)*(3*o.TTL+30*time.Second)+time.Minute)
	section(SectionRest, runAtRest, o.RestWindow+time.Minute)
	if o.Procs != "" && (!o.Skip[SectionRest] || !o.Skip[SectionLoad]) {
		c.Close() // the in-process devices stop: the processes measure alone
		o.progress("three processes of %s", o.Procs)
		limit := 2 * time.Minute
		if !o.Skip[SectionRest] {
			limit += o.RestWindow
		}
		if !o.Skip[SectionLoad] {
			limit += time.Duration(2*len(o.Clients)+1)*o.LoadWindow + time.Minute
		}
		pctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		fail("processes", runProcs(pctx, o, o.Procs, filepath.Join(dir, "procs"), r))
	}
}

// profiled wraps a section in a CPU profile of this process written to
// o.Profile/name (nothing when o.Profile is empty).
func profiled(o Options, name string, f func(context.Context, Options, *testnet.Cluster, *Report) error) func(context.Context, Options, *testnet.Cluster, *Report) error {
	if o.Profile == "" {
		return f
	}
	return func(ctx context.Context, o Options, c *testnet.Cluster, r *Report) error {
		file, err := os.Create(filepath.Join(o.Profile, name))
		if err != nil {
			return err
		}
		defer file.Close()
		if err := pprof.StartCPUProfile(file); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
		return f(ctx, o, c, r)
	}
}
