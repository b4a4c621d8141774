package election

import (
	"context"
	"errors"
	"sync"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
)

// cluster is an in-memory stand-in for the replicated intent log: one authoritative
// state to which every proposal is applied at once, with the DESIGN apply rules for
// lease entries: claims compare the record's revision and the epoch (only the epoch
// with the EpochOnlyClaim knob), renew, release and transfer holder, epoch and
// revision. The real FSM lives in intentlog.
type cluster struct {
	mu       sync.Mutex
	knobs    knobs.Intentlog // the apply's test knobs (EpochOnlyClaim)
	lease    intentlog.Lease
	index    uint64
	members  map[string]bool
	proposed []proposal
	// intercept, when set, runs before an entry is applied. It may block (to line up
	// concurrent proposals) and returns whether to apply the entry and the error
	// Propose should return (an error with apply=true is an unknown outcome that did
	// apply).
	intercept func(ctx context.Context, from string, e intentlog.Entry) (apply bool, err error)
	watch     chan struct{} // closed and replaced on every apply
}

type proposal struct {
	from  string
	entry intentlog.Entry
	res   intentlog.Result
}

func newCluster(members ...string) *cluster {
	c := &cluster{members: map[string]bool{}, watch: make(chan struct{})}
	for _, m := range members {
		c.members[m] = true
	}
	return c
}

func (c *cluster) view() intentlog.View {
	c.mu.Lock()
	defer c.mu.Unlock()
	return intentlog.View{AppliedIndex: c.index, Lease: c.lease}
}

// record returns the authoritative lease record.
func (c *cluster) record() intentlog.Lease { return c.view().Lease }

// entries returns the lease entries proposed by from ("" for all), in order.
func (c *cluster) entries(from string) []intentlog.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []intentlog.Entry
	for _, p := range c.proposed {
		if from == "" || p.from == from {
			out = append(out, p.entry)
		}
	}
	return out
}

func (c *cluster) propose(ctx context.Context, from string, e intentlog.Entry) (intentlog.Result, error) {
	if err := ctx.Err(); err != nil {
		return intentlog.Result{}, err
	}
	apply, ierr := true, error(nil)
	c.mu.Lock()
	hook := c.intercept
	c.mu.Unlock()
	if hook != nil {
		apply, ierr = hook(ctx, from, e)
	}
	if !apply {
		return intentlog.Result{}, ierr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index++
	res := c.applyLocked(e)
	if res.Accepted {
		c.lease.Rev = c.index // every accepted entry here is a lease write
	}
	res.Index = c.index
	res.Lease = c.lease
	c.proposed = append(c.proposed, proposal{from: from, entry: e, res: res})
	close(c.watch)
	c.watch = make(chan struct{})
	return res, ierr
}

func (c *cluster) applyLocked(e intentlog.Entry) intentlog.Result {
	reject := func(r intentlog.Reason) intentlog.Result { return intentlog.Result{Reason: r} }
	check := func(holder string, epoch, prevRev uint64) intentlog.Reason {
		if c.lease.Holder == "" || c.lease.Holder != holder {
			return intentlog.ReasonNotHolder
		}
		if c.lease.Epoch != epoch {
			return intentlog.ReasonEpochMismatch
		}
		if prevRev != c.lease.Rev {
			return intentlog.ReasonStaleRev
		}
		return ""
	}
	switch e := e.(type) {
	case intentlog.ClaimEntry:
		switch {
		case e.Holder == "":
			return reject(intentlog.ReasonBadEntry)
		case e.TTL <= 0:
			return reject(intentlog.ReasonBadEntry)
		case e.Force && e.Reason == "":
			return reject(intentlog.ReasonNoReason)
		case !c.knobs.EpochOnlyClaim && e.PrevRev != c.lease.Rev:
			return reject(intentlog.ReasonStaleRev)
		case e.Epoch != c.lease.Epoch+1:
			return reject(intentlog.ReasonEpochMismatch)
		}
		c.lease = intentlog.Lease{Holder: e.Holder, Epoch: e.Epoch, TS: e.TS, TTL: e.TTL, Nonce: e.Nonce}
	case intentlog.RenewEntry:
		if r := check(e.Holder, e.Epoch, e.PrevRev); r != "" {
			return reject(r)
		}
		c.lease.TS = e.TS
	case intentlog.ReleaseEntry:
		if r := check(e.Holder, e.Epoch, e.PrevRev); r != "" {
			return reject(r)
		}
		c.lease.Holder, c.lease.Nonce = "", 0
	case intentlog.TransferEntry:
		if r := check(e.Holder, e.Epoch, e.PrevRev); r != "" {
			return reject(r)
		}
		if !c.members[e.To] {
			return reject(intentlog.ReasonNotMember)
		}
		c.lease = intentlog.Lease{Holder: e.To, Epoch: e.Epoch + 1, TS: e.TS, TTL: c.lease.TTL}
	default:
		return reject(intentlog.ReasonMalformed)
	}
	return intentlog.Result{Accepted: true}
}

// fakeLog is one device's Log on a cluster. Its view is live unless frozen: a frozen
// view is a replica that stopped applying; it catches up when Sync is called (if the
// log offers Sync), when its own proposal is applied (applying it means applying the
// backlog first), or when thawed.
type fakeLog struct {
	c    *cluster
	self string

	mu     sync.Mutex
	frozen bool
	snap   intentlog.View
	// gate, when set, makes WaitApplied block until it is closed.
	gate chan struct{}
}

// newFakeLog returns a Log on c whose proposals are labelled from (usually the device ID).
func newFakeLog(c *cluster, from string) *fakeLog { return &fakeLog{c: c, self: from} }

func (f *fakeLog) View() intentlog.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		return f.snap
	}
	return f.c.view()
}

func (f *fakeLog) Propose(ctx context.Context, e intentlog.Entry) (intentlog.Result, error) {
	res, err := f.c.propose(ctx, f.self, e)
	f.mu.Lock()
	gated := f.gate != nil
	f.mu.Unlock()
	if !gated {
		f.catchUp()
	}
	return res, err
}

// freeze stops this replica's view where it is.
func (f *fakeLog) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.snap, f.frozen = f.c.view(), true
	}
}

func (f *fakeLog) isFrozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

// thaw makes the view live again.
func (f *fakeLog) thaw() {
	f.mu.Lock()
	f.frozen = false
	f.mu.Unlock()
}

// catchUp brings a frozen view up to the current state (it stays frozen there).
func (f *fakeLog) catchUp() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.snap = f.c.view()
	}
}

func (f *fakeLog) WaitApplied(ctx context.Context, index uint64) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
			f.catchUp()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.View().AppliedIndex < index {
		return errors.New("fakeLog: index not applied")
	}
	return nil
}

// Watch returns a channel closed after the next apply on the cluster (a frozen view
// does not change, but waking up once too often is harmless).
func (f *fakeLog) Watch() <-chan struct{} {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	return f.c.watch
}

// syncLog is a fakeLog that also offers Sync (a barrier).
type syncLog struct {
	*fakeLog
	syncs int
}

func (s *syncLog) Sync(ctx context.Context) error {
	s.mu.Lock()
	s.syncs++
	s.mu.Unlock()
	s.catchUp()
	return ctx.Err()
}

var (
	_ Log           = (*fakeLog)(nil)
	_ AppliedWaiter = (*fakeLog)(nil)
	_ Watcher       = (*fakeLog)(nil)
	_ Syncer        = (*syncLog)(nil)
)

// The real intent log satisfies the Log this package asks for, and can be followed.
var (
	_ Log     = (*intentlog.Log)(nil)
	_ Watcher = (*intentlog.Log)(nil)
)
