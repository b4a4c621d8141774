package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

// Clients behave as real ones do: submit an intent to some device, and after a
// timeout or an error submit the same ID again (to any device, after a backoff),
// until it is acknowledged. Only errors a client cannot retry (a bad request) end
// the retries; they are findings, the simulator's intents are valid.

var errDown = errors.New("sim: device down (connection refused)")

type submitOpts struct {
	dev     int // first device to try (-1: any)
	timeout time.Duration
	signed  bool
	outageP float64
	outage  [2]time.Duration
}

func (w *world) startLoad() {
	p := w.prof
	for c := range p.Clients {
		w.loadWG.Add(1)
		go w.client(c)
	}
	var acked atomic.Int64
	for b := range p.Bulk {
		w.loadWG.Add(1)
		go w.bulk(b, &acked)
	}
	for h := range p.HastyClients {
		w.loadWG.Add(1)
		go w.hasty(h)
	}
	w.startOdd() // inputs.go
}

func (w *world) loadStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopLoad
}

func (w *world) clientRNG(kind uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(w.cfg.Seed), kind<<32|uint64(i)))
}

func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])))
}

func (w *world) client(c int) {
	defer w.loadWG.Done()
	p := w.prof
	rng := w.clientRNG(0xc1, c)
	for i := 0; ; i++ {
		if p.Think > 0 {
			time.Sleep(time.Duration(rng.ExpFloat64() * float64(p.Think)))
		}
		if w.loadStopped() {
			return
		}
		w.submit(rng, fmt.Sprintf("c%d-%d", c, i), submitOpts{dev: -1, timeout: between(rng, p.Timeout),
			signed: rng.Float64() < p.WaitSigned, outageP: p.OutageP, outage: p.Outage})
	}
}

// bulk submits back to back until the profile's BulkIntents were acknowledged.
func (w *world) bulk(b int, acked *atomic.Int64) {
	defer w.loadWG.Done()
	p := w.prof
	rng := w.clientRNG(0xb1, b)
	time.Sleep(p.BulkAt)
	for i := 0; ; i++ {
		if (p.BulkIntents > 0 && acked.Load() >= int64(p.BulkIntents)) || w.loadStopped() {
			return
		}
		if w.submit(rng, fmt.Sprintf("b%d-%d", b, i), submitOpts{dev: -1, timeout: p.Timeout[0]}) {
			acked.Add(1)
		}
	}
}

// hasty submits with a timeout shorter than a Raft round (the intent lands, the
// client hears nothing), is away for a while, then retries the same ID until it is
// acknowledged.
func (w *world) hasty(h int) {
	defer w.loadWG.Done()
	p := w.prof
	rng := w.clientRNG(0x4a, h)
	time.Sleep(p.HastyAt)
	for i := 0; ; i++ {
		if w.loadStopped() {
			return
		}
		id := fmt.Sprintf("h%d-%d", h, i)
		in := w.intentOf(id)
		if n, _ := w.devs[rng.IntN(w.cfg.Devices)].node(); n != nil {
			ctx, cancel := context.WithTimeout(context.Background(), p.Hasty)
			r, err := n.Submit(ctx, in, node.WaitCommitted)
			cancel()
			if err == nil {
				w.chk.ack(id, r)
				continue
			}
			w.ev.add(-1, "hasty", "%s: %v (acked so far %d)", id, err, w.chk.acked())
		}
		if p.HastyAfter > 0 {
			w.awayUntilAcked(w.chk.acked() + p.HastyAfter)
		} else {
			w.away(between(rng, p.HastyOutage))
		}
		w.submit(rng, id, submitOpts{dev: -1, timeout: 2 * time.Second})
	}
}

// burst is a fault: n clients submit at once to one device.
func (w *world) burst(a action, dev int) {
	for i := range a.N {
		w.loadWG.Add(1)
		go func() {
			defer w.loadWG.Done()
			rng := rand.New(rand.NewPCG(a.Seed, uint64(i)))
			w.submit(rng, fmt.Sprintf("x%d-%d", a.ID, i), submitOpts{dev: dev, timeout: between(rng, w.prof.Timeout)})
		}()
	}
}

func intentOf(id string) intentlog.Intent {
	return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.sim/" + id, Value: []byte(id)}
}

// away sleeps d, or less if the fault phase ends meanwhile (the client comes back
// for the recovery).
func (w *world) away(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.recovering:
	}
}

// awayUntilAcked waits until n intents were acknowledged in all, or the fault phase
// ends.
func (w *world) awayUntilAcked(n int) {
	for w.chk.acked() < n {
		select {
		case <-w.recovering:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// submit submits id until it is acknowledged; it reports false if it gave up (the
// run's give-up deadline passed, or an error no client would retry).
func (w *world) submit(rng *rand.Rand, id string, o submitOpts) bool {
	return w.submitIntent(rng, w.intentOf(id), o)
}

// submitIntent is submit for any valid intent.
func (w *world) submitIntent(rng *rand.Rand, in intentlog.Intent, o submitOpts) bool {
	id := in.ID
	wait := node.WaitCommitted
	if o.signed {
		wait = node.WaitSigned
	}
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if w.pastGiveUp() {
			w.chk.gaveUp(id)
			return false
		}
		dev := o.dev
		if attempt > 0 || dev < 0 {
			dev = rng.IntN(w.cfg.Devices)
		}
		err := errDown
		if n, _ := w.devs[dev].node(); n != nil {
			ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
			var r node.SubmitResult
			r, err = n.Submit(ctx, in, wait)
			cancel()
			if err == nil {
				w.chk.ack(id, r)
				return true
			}
		}
		if errors.Is(err, node.ErrBadRequest) || errors.Is(err, node.ErrBadPath) || errors.Is(err, node.ErrTooLarge) ||
			errors.Is(err, node.ErrRejected) {
			w.violation(VClientError, dev, "submit %s: %v", id, err)
			return false
		}
		time.Sleep(backoff/2 + time.Duration(rng.Int64N(int64(backoff))))
		backoff = min(2*backoff, 500*time.Millisecond)
		if o.outageP > 0 && rng.Float64() < o.outageP {
			w.away(between(rng, o.outage))
		}
	}
}
