package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonhq/baton/testnet"
)

// procUsage reads this process's RSS (bytes) and CPU time (user+system) from /proc.
func procUsage() (rss int64, cpu time.Duration, err error) { return procUsageAt("/proc/self") }

// procUsageAt reads RSS and CPU time from a /proc/<pid> directory.
func procUsageAt(dir string) (rss int64, cpu time.Duration, err error) {
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				rss = kb << 10
			}
		}
	}
	st, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return rss, 0, err
	}
	// Fields after the command (which may hold spaces) start after the last ')'.
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return rss, 0, errors.New("short " + dir + "/stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return rss, time.Duration(ut+stt) * time.Second / clkTck, nil
}

// snapshotAll takes a Raft snapshot on every live device (nothing new to snapshot
// is not an error).
func snapshotAll(c *testnet.Cluster) error {
	for _, n := range c.Nodes() {
		if err := n.Log().Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// runAtRest leaves the cluster idle for o.RestWindow after a snapshot and measures
// the Raft entries written (all of them lease entries when idle), disk before and
// after the snapshot and at the end, and the process's RSS and CPU.
func runAtRest(ctx context.Context, o Options, c *testnet.Cluster, r *Report) error {
	a := &AtRestResult{WindowS: o.RestWindow.Seconds()}
	r.AtRest = a
	if _, _, err := c.WaitHolder(ctx, 0); err != nil {
		return err
	}
	a.DiskBefore = diskBytes(c)
	// Two snapshots a few renewals apart: Raft keeps the newest two
	// (intentlog.DefaultSnapshotRetain), so from here on a snapshot replaces one of
	// the same size and the window's growth is the logs' and state files'.
	for i := range 2 {
		if i > 0 {
			if err := sleepCtx(ctx, 2*o.TTL); err != nil {
				return err
			}
		}
		if err := snapshotAll(c); err != nil {
			return err
		}
	}
	a.DiskAfter = diskBytes(c)
	h, _, err := c.WaitHolder(ctx, 0)
	if err != nil {
		return err
	}
	log := h.Node().Log()
	idx0 := log.Raft().LastIndex()
	hist0, _ := log.LeaseHistory()
	rss0, cpu0, err := procUsage()
	if err != nil {
		return err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.RestWindow):
	}
	el := time.Since(t0)
	rss1, cpu1, err := procUsage()
	if err != nil {
		return err
	}
	if h2, _, ok := c.Holder(); ok {
		log = h2.Node().Log()
	}
	a.LeaseEntries = int(log.Raft().LastIndex() - idx0)
	a.LeaseEntriesPerTTL = ratio(float64(a.LeaseEntries), el.Seconds()/o.TTL.Seconds())
	if hist1, err := log.LeaseHistory(); err == nil && len(hist0) > 0 {
		last := hist0[len(hist0)-1].Index
		kinds := map[string]int{}
		for _, e := range hist1 {
			if e.Index > last {
				kinds[e.Event]++
			}
		}
		a.Note = fmt.Sprintf("lease history over the window: %v; ", kinds)
	}
	a.DiskEnd = diskBytes(c)
	if err := snapshotAll(c); err != nil {
		return err
	}
	a.DiskAfterWindow = diskBytes(c)
	a.Devices = []Usage{{
		Name:   "all 3 devices (one process)",
		RSSMiB: float64(max(rss0, rss1)) / (1 << 20),
		CPUPct: ratio(float64(cpu1-cpu0)*100, float64(el)),
	}}
	a.Devices = append(a.Devices, Usage{Name: "per device (process / 3)", RSSMiB: a.Devices[0].RSSMiB / 3, CPUPct: a.Devices[0].CPUPct / 3})
	a.Note += "RSS and CPU are the bench process's (three devices in one process, after the load and failover sections; the Go heap keeps what they grew), not per device"
	return nil
}

// cpuMeter measures the CPU time (user and system) this process and the processes
// pids use from its start: the load phases' cpu µs/op. Where /proc cannot tell, it
// measures nothing (perOp is 0).
type cpuMeter struct {
	pids []int
	t0   time.Duration
	ok   bool
}

func startCPU(pids ...int) cpuMeter {
	t, ok := cpuTime(pids)
	return cpuMeter{pids: pids, t0: t, ok: ok}
}

// perOp is the CPU used since startCPU per op, in microseconds, to one decimal.
func (m cpuMeter) perOp(ops int) float64 {
	t, ok := cpuTime(m.pids)
	if !m.ok || !ok || ops <= 0 {
		return 0
	}
	return round1(float64((t - m.t0).Microseconds()) / float64(ops))
}

func cpuTime(pids []int) (time.Duration, bool) {
	_, t, err := procUsageAt("/proc/self")
	if err != nil {
		return 0, false
	}
	for _, p := range pids {
		_, c, err := pidUsage(p)
		if err != nil {
			return 0, false
		}
		t += c
	}
	return t, true
}
