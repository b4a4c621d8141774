package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// runLoadProcs measures the load phases over three `baton run` processes (--procs):
// each device has its own process (its own scheduler, GC and allocations, as on three
// machines), the clients submit through the Unix socket of the holder, which is moved
// to the Raft leader first (the in-process rows' arrangement). The machine's two cores
// are still shared by the three processes and the clients.
func runLoadProcs(ctx context.Context, o Options, pc *testnet.ProcCluster, r *Report) error {
	h, err := holderLeader(ctx, pc)
	if err != nil {
		return err
	}
	sock := newSocketClients(filepath.Join(h.Dir, api.SocketFile))
	defer sock.close()
	state := func() (node.State, error) {
		st, ok := pc.State(h)
		if !ok {
			return st, fmt.Errorf("%s does not answer", h.Label())
		}
		return st, nil
	}
	// Warm up: connections, bolt file growth, the first commits.
	if _, _, err := runLoad(ctx, 16, o.LoadWindow/4, func(ctx context.Context, cl, i int) error {
		return sock.submit(ctx, cl, fmt.Sprintf("pwarm%d-%d-%d", runSeq.Add(1), cl, i), make([]byte, o.Payload), node.WaitCommitted)
	}); err != nil {
		return fmt.Errorf("procs warm-up: %w", err)
	}
	value := make([]byte, o.Payload)
	for _, n := range o.Clients {
		// A process's socket serves at most api.DefaultMaxConns connections, and Go's
		// HTTP client now and then opens a second one for a client whose first is not
		// back in its idle pool yet: a connection past the limit waits in the accept
		// queue until another closes (30 s and more in a run at 64 clients). Stay
		// below it; the row says how many clients ran.
		n = min(n, procsMaxClients)
		phase := func(w node.Wait) (float64, Dist, error) {
			run := runSeq.Add(1)
			rate, lats, err := runLoad(ctx, n, o.LoadWindow, func(ctx context.Context, cl, i int) error {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				return sock.submit(sctx, cl, fmt.Sprintf("p%d-c%d-%d", run, cl, i), value, w)
			})
			return round1(rate), Summarise(lats), err
		}
		l := BatonLoad{API: "socket, 3 processes", Clients: n}
		if l.AcceptedPerSec, l.Accepted, err = phase(node.WaitCommitted); err != nil {
			return fmt.Errorf("procs, %d clients, accepted: %w", n, err)
		}
		if err := wait.Until(ctx, "no intent pending", func() bool { st, err := state(); return err == nil && st.Pending == 0 }); err != nil {
			return err
		}
		st0, err := state()
		if err != nil {
			return err
		}
		var pids []int
		for _, d := range pc.Devices() {
			pids = append(pids, pc.Pid(d))
		}
		cpu := startCPU(pids...)
		if l.SignedPerSec, l.Signed, err = phase(node.WaitSigned); err != nil {
			return fmt.Errorf("procs, %d clients, signed: %w", n, err)
		}
		l.CPUUsPerOp = cpu.perOp(l.Signed.N)
		st1, err := state()
		if err != nil {
			return err
		}
		if commits := st1.Head.Seq - st0.Head.Seq; commits > 0 {
			l.IntentsPerCommit = round1(float64(l.Signed.N) / float64(commits))
		}
		r.BatonProcs = append(r.BatonProcs, l)
		o.progress("baton over processes, %d clients: accepted %.0f/s p50 %.2f ms, signed %.0f/s p50 %.2f ms, %.1f intents/commit",
			n, l.AcceptedPerSec, l.Accepted.P50Ms, l.SignedPerSec, l.Signed.P50Ms, l.IntentsPerCommit)
	}
	return nil
}

// procsMaxClients caps the clients of a load phase over processes (see above).
const procsMaxClients = api.DefaultMaxConns * 3 / 4

// holderLeader moves the lease to the process that leads Raft and returns it.
func holderLeader(ctx context.Context, pc *testnet.ProcCluster) (*testnet.Device, error) {
	for attempt := 0; attempt < 10; attempt++ {
		var h, l *testnet.Device
		if err := wait.Until(ctx, "a holder and a Raft leader among the processes", func() bool {
			h, l = nil, nil
			d, _, ok := pc.Holder()
			if !ok {
				return false
			}
			h = d
			for _, x := range pc.Devices() {
				if st, ok := pc.State(x); ok && st.Raft.Role == "Leader" {
					l = x
				}
			}
			return l != nil
		}); err != nil {
			return nil, err
		}
		if h == l {
			return h, nil
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pc.Transfer(tctx, h, l)
		cancel()
		if err != nil {
			continue // the hold or the leadership moved meanwhile: look again
		}
		_ = wait.Until(ctx, "the transfer applied", func() bool { d, _, ok := pc.Holder(); return ok && d == l })
	}
	return nil, fmt.Errorf("could not place the holder on the Raft leader among the processes")
}
