package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// submitter submits one intent and waits as told.
type submitter func(ctx context.Context, client int, id string, value []byte, wait node.Wait) error

var runSeq atomic.Uint64 // keeps intent ids unique across phases and runs

// measureLoad runs an accepted phase and a signed phase with clients concurrent
// clients through submit, and counts the commits the signed phase made on dev.
func measureLoad(ctx context.Context, o Options, dev *testnet.Device, api string, clients int, submit submitter) (BatonLoad, error) {
	log := dev.Node().Log()
	value := make([]byte, o.Payload)
	phase := func(wait node.Wait) (float64, Dist, error) {
		run := runSeq.Add(1)
		rate, lats, err := runLoad(ctx, clients, o.LoadWindow, func(ctx context.Context, client, i int) error {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return submit(sctx, client, fmt.Sprintf("r%d-c%d-%d", run, client, i), value, wait)
		})
		return rate, Summarise(lats), err
	}
	out := BatonLoad{API: api, Clients: clients}
	var err error
	if out.AcceptedPerSec, out.Accepted, err = phase(node.WaitCommitted); err != nil {
		return out, fmt.Errorf("%s, %d clients, accepted: %w", api, clients, err)
	}
	// Let the signer drain what the accepted phase left pending before the signed
	// phase: its latencies must not include that backlog.
	if err := wait.Until(ctx, "no intent pending", func() bool { return log.View().Pending == 0 }); err != nil {
		return out, fmt.Errorf("draining pending intents: %w", err)
	}
	seq0, cpu := log.View().Head.Seq, startCPU()
	if out.SignedPerSec, out.Signed, err = phase(node.WaitSigned); err != nil {
		return out, fmt.Errorf("%s, %d clients, signed: %w", api, clients, err)
	}
	out.CPUUsPerOp = cpu.perOp(out.Signed.N)
	if commits := log.View().Head.Seq - seq0; commits > 0 {
		out.IntentsPerCommit = round1(float64(out.Signed.N) / float64(commits))
	}
	out.AcceptedPerSec, out.SignedPerSec = round1(out.AcceptedPerSec), round1(out.SignedPerSec)
	return out, nil
}

// runLoads measures every client count through the Go API and the socket API of the
// device that holds the lease and leads Raft (the comparable case to the baseline,
// which applies on its leader).
func runLoads(ctx context.Context, o Options, c *testnet.Cluster, r *Report) error {
	dev, err := arrange(ctx, c, true)
	if err != nil {
		return err
	}
	goAPI := func(ctx context.Context, _ int, id string, value []byte, wait node.Wait) error {
		_, err := submit(ctx, dev, id, value, wait)
		return err
	}
	sock := newSocketClients(filepath.Join(dev.Dir, api.SocketFile))
	defer sock.close()
	// Warm up: connections, bolt file growth, the first commits.
	if _, _, err := runLoad(ctx, 16, o.LoadWindow/4, func(ctx context.Context, cl, i int) error {
		return goAPI(ctx, cl, fmt.Sprintf("warm%d-%d-%d", runSeq.Add(1), cl, i), make([]byte, o.Payload), node.WaitCommitted)
	}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for _, via := range []struct {
		name string
		f    submitter
	}{{"go", goAPI}, {"socket", sock.submit}} {
		for _, n := range o.Clients {
			if nd := dev.Node(); nd == nil || !nd.Holds() {
				if dev, err = arrange(ctx, c, true); err != nil {
					return err
				}
			}
			l, err := measureLoad(ctx, o, dev, via.name, n, via.f)
			if err != nil {
				return err
			}
			r.Baton = append(r.Baton, l)
			o.progress("baton %s %d clients: accepted %.0f/s p50 %.2f ms, signed %.0f/s p50 %.2f ms, %.1f intents/commit",
				via.name, n, l.AcceptedPerSec, l.Accepted.P50Ms, l.SignedPerSec, l.Signed.P50Ms, l.IntentsPerCommit)
		}
	}
	return nil
}
