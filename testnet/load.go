package testnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

// Defaults for LoadConfig fields left zero.
const (
	DefaultLoadRate    = 50   // intents per second
	DefaultLoadMax     = 2000 // intents per generator
	DefaultLoadWorkers = 4
)

// Submitter is what the load generator needs from a device: submit one intent and
// return once it is acknowledged (in the Raft log: the API's 202).
type Submitter interface {
	Submit(ctx context.Context, in intentlog.Intent, wait node.Wait) (node.SubmitResult, error)
}

var _ Submitter = (*node.Node)(nil)

// Target is one device the load generator may submit to.
type Target struct {
	Device    string
	Submitter Submitter
}

// LoadConfig configures a load generator.
type LoadConfig struct {
	// Targets returns the devices to submit to right now (the generator round-robins
	// over them; none = skip this slot). Called once per intent.
	Targets func() []Target
	Rate    int           // intents per second (default 50)
	Max     int           // stop after this many submissions (default 2000)
	Workers int           // concurrent submissions (default 4)
	Timeout time.Duration // per submission (default 5 s)
	Prefix  string        // id prefix (default "load")
	// Retries resubmits a failed intent with the same id (an idempotency key) on the
	// next target, up to this many times, as a careful client does (default 0).
	Retries int
	// Format is the chain's commit format (LoadIntent; nil: baton's).
	Format chain.Format
}

// Load submits intents with unique ids at a bounded rate until it has submitted Max
// of them or Stop is called, and records which were acknowledged. Submissions that
// fail are counted, not retried: their outcome is unknown (they may still be signed,
// which is allowed; only acknowledged ones must be).
type Load struct {
	cfg       LoadConfig
	submitted atomic.Int64
	failed    atomic.Int64
	retried   atomic.Int64
	cancelled atomic.Int64
	mu        sync.Mutex
	acks      []Ack
	fails     []time.Time    // when each failed submission gave up
	errs      map[string]int // failed submissions by the API's error code
	cancel    context.CancelFunc
	done      chan struct{}
}

// StartLoad starts a load generator; it stops by itself after Max submissions or
// when ctx is done or Stop is called.
func StartLoad(ctx context.Context, cfg LoadConfig) (*Load, error) {
	if cfg.Targets == nil {
		return nil, fmt.Errorf("%w: load needs Targets", ErrBadConfig)
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultLoadRate
	}
	if cfg.Max <= 0 {
		cfg.Max = DefaultLoadMax
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultLoadWorkers
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "load"
	}
	l := &Load{cfg: cfg, done: make(chan struct{}), errs: map[string]int{}}
	ctx, l.cancel = context.WithCancel(ctx)
	go l.run(ctx)
	return l, nil
}

func (l *Load) run(ctx context.Context) {
	defer close(l.done)
	slots := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < l.cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range slots {
				l.one(ctx, i)
			}
		}()
	}
	tk := time.NewTicker(time.Second / time.Duration(l.cfg.Rate))
	defer tk.Stop()
loop:
	for i := 0; i < l.cfg.Max; i++ {
		select {
		case <-ctx.Done():
			break loop
		case <-tk.C:
		}
		select {
		case slots <- i:
		case <-ctx.Done():
			break loop
		}
	}
	close(slots)
	wg.Wait()
}

func (l *Load) one(ctx context.Context, i int) {
	id := fmt.Sprintf("%s-%06d", l.cfg.Prefix, i)
	f := l.cfg.Format
	if f == nil {
		f = chain.Baton
	}
	in := LoadIntent(f, id)
	submitted := false
	var lastErr error
	for try := 0; try <= l.cfg.Retries && ctx.Err() == nil; try++ {
		ts := l.cfg.Targets()
		if len(ts) == 0 {
			if !submitted {
				return // nothing to submit to: skip the slot
			}
			break
		}
		if !submitted {
			l.submitted.Add(1)
			submitted = true
		} else {
			l.retried.Add(1)
		}
		t := ts[(i+try)%len(ts)]
		sctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		res, err := t.Submitter.Submit(sctx, in, node.WaitCommitted)
		cancel()
		lastErr = err
		if err == nil {
			l.mu.Lock()
			l.acks = append(l.acks, Ack{ID: id, At: time.Now(), Device: t.Device, Index: res.Index})
			l.mu.Unlock()
			return
		}
	}
	if submitted && ctx.Err() != nil {
		l.cancelled.Add(1) // stopped while waiting: unknown outcome, not an error
		return
	}
	if submitted {
		l.failed.Add(1)
		l.mu.Lock()
		l.fails = append(l.fails, time.Now())
		l.errs[errorCode(lastErr)]++
		l.mu.Unlock()
	}
}

// Stop stops the generator and waits for in-flight submissions.
func (l *Load) Stop() {
	l.cancel()
	<-l.done
}

// Done is closed when the generator has finished.
func (l *Load) Done() <-chan struct{} { return l.done }

// Acks returns the acknowledged intents so far.
func (l *Load) Acks() []Ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Ack(nil), l.acks...)
}

// Counts returns submitted and failed counts and the number acknowledged.
func (l *Load) Counts() Counts {
	l.mu.Lock()
	acked := len(l.acks)
	errs := maps.Clone(l.errs)
	l.mu.Unlock()
	return Counts{Submitted: int(l.submitted.Load()), Acked: acked, Failed: int(l.failed.Load()), Retried: int(l.retried.Load()), Cancelled: int(l.cancelled.Load()), Errors: errs}
}

// errorCode names a failed submission's error the way the API does (timeout,
// no_quorum, stopped, ...), whether it came over the socket or from a node.
func errorCode(err error) string {
	var ae *api.APIError
	var oe *net.OpError
	switch {
	case err == nil:
		return "none"
	case errors.As(err, &ae):
		return ae.Code
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &oe) && oe.Op == "dial":
		return "socket_refused" // the device's API is not listening (down, or stopping)
	case errors.As(err, &oe), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "socket_closed" // the device went away mid-request
	}
	code, _ := api.Code(err)
	return code
}

// loadSeries buckets the generators' acknowledgements and failures over [from, to]
// (at most about 300 buckets, whole seconds or more).
func loadSeries(ls []*Load, from, to time.Time) []LoadBucket {
	span := to.Sub(from)
	width := time.Second
	for span/width > 300 {
		width *= 2
	}
	n := int(span/width) + 1
	out := make([]LoadBucket, n)
	for i := range out {
		out[i].At = from.Add(time.Duration(i) * width)
	}
	at := func(t time.Time) int { return min(max(int(t.Sub(from)/width), 0), n-1) }
	for _, l := range ls {
		if l == nil {
			continue
		}
		l.mu.Lock()
		for _, a := range l.acks {
			out[at(a.At)].Acked++
		}
		for _, f := range l.fails {
			out[at(f)].Failed++
		}
		l.mu.Unlock()
	}
	return out
}
