package bench

import (
	"bytes"
	"context"

	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/signer/api"
)

// procDevice is one `baton run` process.
type procDevice struct {
	dir  string
	cmd  *exec.Cmd
	cl   *api.Client
	logf *os.File
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAtRestProcs measures an idle cluster of three `baton run` processes of the
// binary bin: per-device RSS and CPU from /proc/<pid>, lease entries from the Raft
// index, disk of the data dirs. Snapshots are Raft's own here (no API triggers one).
func runAtRestProcs(ctx context.Context, o Options, bin, dir string, r *Report) (err error) {
	a := &AtRestResult{WindowS: o.RestWindow.Seconds(), PerDevice: true}
	r.AtRestProcs = a
	var devs []*procDevice
	defer func() {
		for _, d := range devs {
			if d.cmd.Process != nil {
				_ = d.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		for _, d := range devs {
			done := make(chan struct{})
			go func() { _ = d.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = d.cmd.Process.Kill()
				<-done
			}
			d.logf.Close()
			if d.cl != nil {
				d.cl.Close()
			}
		}
	}()
	run := func(args ...string) ([]byte, error) {
		var out, errb bytes.Buffer
		c := exec.CommandContext(ctx, bin, args...)
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), args[0], err, strings.TrimSpace(errb.String()))
		}
		return out.Bytes(), nil
	}
	start := func(i int, args ...string) (*procDevice, error) {
		d := &procDevice{dir: filepath.Join(dir, fmt.Sprint("proc", i))}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if d.logf, err = os.Create(filepath.Join(dir, fmt.Sprintf("proc%d.log", i))); err != nil {
			return nil, err
		}
		full := append([]string{args[0], "--data", d.dir, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port),
			"--ttl", o.TTL.String(), "--tick", o.Tick.String(), "--raft-timeout", "500ms"}, args[1:]...)
		d.cmd = exec.Command(bin, full...)
		d.cmd.Stdout, d.cmd.Stderr = d.logf, d.logf
		if err := d.cmd.Start(); err != nil {
			return nil, err
		}
		devs = append(devs, d)
		if err := poll(ctx, func() bool {
			if d.cl == nil {
				if _, err := os.Stat(filepath.Join(d.dir, api.SocketFile)); err != nil {
					return false
				}
				d.cl, _ = api.NewClient(filepath.Join(d.dir, api.SocketFile), "")
				if d.cl == nil {
					return false
				}
			}
			return d.cl.Health(ctx) == nil
		}); err != nil {
			return nil, fmt.Errorf("device %d did not come up (log in %s): %w", i, d.logf.Name(), err)
		}
		return d, nil
	}
	if _, err := run("init", "--data", filepath.Join(dir, "proc0"), "--new-chain"); err != nil {
		return err
	}
	d0, err := start(0, "run")
	if err != nil {
		return err
	}
	for i := 1; i < 3; i++ {
		inv, err := run("invite", "--data", d0.dir, "--with-chain-key")
		if err != nil {
			return err
		}
		if _, err := start(i, "join", strings.TrimSpace(string(inv))); err != nil {
			return err
		}
	}
	holder := func() *procDevice {
		for _, d := range devs {
			if st, err := d.cl.State(ctx); err == nil && st.Lease.HeldByMe && st.Members == 3 {
				return d
			}
		}
		return nil
	}
	var h *procDevice
	if err := poll(ctx, func() bool { h = holder(); return h != nil }); err != nil {
		return fmt.Errorf("no holder among the processes: %w", err)
	}
	// Settle: joins, the first renewals, Go runtime warm-up.
	if err := sleepCtx(ctx, 3*o.TTL); err != nil {
		return err
	}
	st0, err := h.cl.State(ctx)
	if err != nil {
		return err
	}
	a.DiskBefore = dirsBytes(devs)
	a.DiskAfter = a.DiskBefore
	cpu0 := make([]time.Duration, len(devs))
	for i, d := range devs {
		if _, cpu0[i], err = pidUsage(d.cmd.Process.Pid); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, o.RestWindow); err != nil {
		return err
	}
	el := time.Since(t0)
	for i, d := range devs {
		rss, cpu, err := pidUsage(d.cmd.Process.Pid)
		if err != nil {
			return err
		}
		role := "follower"
		if d == h {
			role = "holder"
		}
		if st, err := d.cl.State(ctx); err == nil && st.Raft.Role == "Leader" {
			role += ", raft leader"
		}
		a.Devices = append(a.Devices, Usage{
			Name:   fmt.Sprintf("device %d (%s, pid %d)", i, role, d.cmd.Process.Pid),
			RSSMiB: float64(rss) / (1 << 20),
			CPUPct: ratio(float64(cpu-cpu0[i])*100, float64(el)),
		})
	}
	st1, err := h.cl.State(ctx)
	if err != nil {
		return err
	}
	a.LeaseEntries = int(st1.Raft.LastIndex - st0.Raft.LastIndex)
	a.LeaseEntriesPerTTL = ratio(float64(a.LeaseEntries), el.Seconds()/o.TTL.Seconds())
	a.DiskEnd = dirsBytes(devs)
	a.DiskAfterWindow = a.DiskEnd
	a.Note = "three `baton run` processes (--procs): RSS and CPU per process from /proc; Raft entries of any kind over the window; " +
		"disk is before and after the window (no snapshot is forced in this mode)"
	return nil
}

func dirsBytes(devs []*procDevice) int64 {
	var n int64
	for _, d := range devs {
		n += dirBytes(d.dir)
	}
	return n
}

// pidUsage reads a process's RSS and CPU time (user+system) from /proc.
func pidUsage(pid int) (int64, time.Duration, error) {
	return procUsageAt("/proc/" + strconv.Itoa(pid))
}
