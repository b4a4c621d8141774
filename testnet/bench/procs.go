package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// runProcs starts three `baton run` processes of the binary bin
// (testnet.ProcCluster, without its timeline: nothing polls the processes during the
// window) and measures on them what o does not skip: the idle window
// (runAtRestProcs), then the load phases (runLoadProcs).
func runProcs(ctx context.Context, o Options, bin, dir string, r *Report) error {
	pcfg := testnet.ProcsConfig{Bin: bin, Nodes: 3, TTL: o.TTL, Tick: o.Tick,
		RaftTimeout: -1, Dir: dir, SampleEvery: -1} // production: the binary's default Raft timeouts
	var pprofAddrs []string
	if o.Profile != "" && !o.Skip[SectionRest] {
		for range 3 {
			addr, err := freeLoopback()
			if err != nil {
				return err
			}
			pprofAddrs = append(pprofAddrs, addr)
		}
		pcfg.Flags = func(i int) []string { return []string{"--pprof-addr", pprofAddrs[i]} }
	}
	pc, err := testnet.NewProcCluster(pcfg)
	if err != nil {
		return err
	}
	defer pc.Close()
	if err := pc.Start(ctx); err != nil {
		return err
	}
	var h *testnet.Device
	if err := wait.Until(ctx, "a holder among the processes with 3 members", func() bool {
		d, _, ok := pc.Holder()
		var st node.State
		if ok {
			st, ok = pc.State(d)
		}
		h = d
		return ok && st.Members == 3
	}); err != nil {
		return err
	}
	if !o.Skip[SectionRest] {
		if err := runAtRestProcs(ctx, o, pc, h, pprofAddrs, r); err != nil {
			return err
		}
	}
	if o.Skip[SectionLoad] {
		return nil
	}
	return runLoadProcs(ctx, o, pc, r) // after the window: the idle figures are the idle cluster's
}

// runAtRestProcs measures the idle processes of pc, h the holder: per-device RSS and
// CPU from /proc/<pid>, lease entries from the Raft index, disk of the data dirs, and
// with pprofAddrs a CPU profile of each over the window. Snapshots are Raft's own here
// (no API triggers one).
func runAtRestProcs(ctx context.Context, o Options, pc *testnet.ProcCluster, h *testnet.Device, pprofAddrs []string, r *Report) error {
	a := &AtRestResult{WindowS: o.RestWindow.Seconds(), PerDevice: true}
	r.AtRestProcs = a
	// Settle: joins, the first renewals, Go runtime warm-up.
	if err := sleepCtx(ctx, 3*o.TTL); err != nil {
		return err
	}
	st0, ok := pc.State(h)
	if !ok {
		return fmt.Errorf("%s does not answer", h.Label())
	}
	devs := pc.Devices()
	a.DiskBefore = dirsBytes(devs)
	a.DiskAfter = a.DiskBefore
	cpu0 := make([]time.Duration, len(devs))
	for i, d := range devs {
		var err error
		if _, cpu0[i], err = pidUsage(pc.Pid(d)); err != nil {
			return err
		}
	}
	t0 := time.Now()
	profiles := make(chan error, len(pprofAddrs))
	for i, addr := range pprofAddrs {
		go func() {
			profiles <- fetchProfile(ctx, addr, o.RestWindow, filepath.Join(o.Profile, fmt.Sprintf("rest-d%d.pprof", i)))
		}()
	}
	if err := sleepCtx(ctx, o.RestWindow); err != nil {
		return err
	}
	el := time.Since(t0)
	for range pprofAddrs {
		if err := <-profiles; err != nil {
			return err
		}
	}
	for i, d := range devs {
		rss, cpu, err := pidUsage(pc.Pid(d))
		if err != nil {
			return err
		}
		role := "follower"
		if d == h {
			role = "holder"
		}
		if st, ok := pc.State(d); ok && st.Raft.Role == "Leader" {
			role += ", raft leader"
		}
		a.Devices = append(a.Devices, Usage{
			Name:   fmt.Sprintf("device %d (%s, pid %d)", i, role, pc.Pid(d)),
			RSSMiB: float64(rss) / (1 << 20),
			CPUPct: ratio(float64(cpu-cpu0[i])*100, float64(el)),
		})
	}
	st1, ok := pc.State(h)
	if !ok {
		return fmt.Errorf("%s does not answer", h.Label())
	}
	a.LeaseEntries = int(st1.Raft.LastIndex - st0.Raft.LastIndex)
	a.LeaseEntriesPerTTL = ratio(float64(a.LeaseEntries), el.Seconds()/o.TTL.Seconds())
	a.DiskEnd = dirsBytes(devs)
	a.DiskAfterWindow = a.DiskEnd
	a.Note = "three `baton run` processes (--procs): RSS and CPU per process from /proc; Raft entries of any kind over the window; " +
		"disk is before and after the window (no snapshot is forced in this mode)"
	return nil
}

func dirsBytes(devs []*testnet.Device) int64 {
	var n int64
	for _, d := range devs {
		n += dirBytes(d.Dir)
	}
	return n
}

// pidUsage reads a process's RSS and CPU time (user+system) from /proc.
func pidUsage(pid int) (int64, time.Duration, error) {
	return procUsageAt("/proc/" + strconv.Itoa(pid))
}

// freeLoopback returns a 127.0.0.1 address with a port free a moment ago.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fetchProfile writes a CPU profile of window from a `baton run --pprof-addr addr`
// to file.
func fetchProfile(ctx context.Context, addr string, window time.Duration, file string) error {
	secs := max(int(window/time.Second), 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile of %s: %s", addr, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile of %s: %w", addr, err)
	}
	return f.Close()
}
