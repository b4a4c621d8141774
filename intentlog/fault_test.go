package intentlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// failWrites makes the FSM's next n write transactions fail with err (as a full disk
// or an I/O error would), and makes each retry wait for the test: waits receives the
// attempt number, and the retry goes ahead when the test sends on proceed (or gives up
// when it closes it).
func failWrites(f *FSM, n int, err error) (waits <-chan int, proceed chan<- bool) {
	w, p := make(chan int), make(chan bool)
	failed := 0
	real := f.update
	f.update = func(fn func(*bolt.Tx) error) error {
		if failed < n {
			failed++
			// Run fn for real and roll it back: a commit that fails after the work.
			_ = real(func(tx *bolt.Tx) error {
				if e := fn(tx); e != nil {
					return e
				}
				return errRollback
			})
			return err
		}
		return real(fn)
	}
	f.retryWait = func(attempt int) bool {
		w <- attempt
		return <-p
	}
	return w, p
}

var errRollback = errors.New("test: roll back")

// DESIGN: a full disk is detected and reported, never a panic: the apply blocks,
// retrying, and Fault says why; once a write succeeds nothing was lost or skipped.
func TestWriteFaultRetriedNotLost(t *testing.T) {
	h := newHarness(t)
	held(h)
	waits, proceed := failWrites(h.f, 3, syscall.ENOSPC)
	logs := []*raft.Log{
		{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, one(put("a", "c/1", "v")))},
		{Index: 3, Type: raft.LogCommand, Data: mustEncode(t, one(put("b", "c/2", "v")))},
	}
	done := make(chan []any)
	go func() { done <- h.f.ApplyBatch(logs) }()
	for want := 0; want < 3; want++ {
		if got := <-waits; got != want {
			t.Fatalf("retry attempt %d, want %d", got, want)
		}
		err := h.f.Fault()
		var fe *FaultError
		if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &fe) || fe.Halted || fe.File != StateFile {
			t.Fatalf("fault during the retries: %v", err)
		}
		if !strings.Contains(err.Error(), "state.db: cannot write: no space left on device") {
			t.Fatalf("fault message %q", err)
		}
		if v := h.f.View(); v.AppliedIndex != 1 {
			t.Fatalf("applied %d while the writes fail", v.AppliedIndex)
		}
		proceed <- true
	}
	out := <-done
	for i, o := range out {
		if r, ok := o.(Result); !ok || !r.Accepted {
			t.Fatalf("entry %d after the fault cleared: %#v", i, o)
		}
	}
	if err := h.f.Fault(); err != nil {
		t.Fatalf("fault after a successful write: %v", err)
	}
	if v := h.f.View(); v.AppliedIndex != 3 || v.Pending != 2 {
		t.Fatalf("view %+v: an entry was lost or skipped", v)
	}
}

// Close during a write fault gives up the retries, returns the fault, and does not mark
// the state file clean: the next start sets it aside and rebuilds it.
func TestCloseDuringWriteFault(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	h.mustAccept(one(put("a", "c/1", "v")))
	waits, proceed := failWrites(f, 1<<30, syscall.EIO)
	done := make(chan []any)
	go func() {
		done <- f.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, one(put("b", "c/2", "v")))}})
	}()
	<-waits
	closed := make(chan error)
	go func() { closed <- f.Close() }()
	proceed <- false // what retryWait answers once Close has begun
	out := <-done
	if e, ok := out[0].(error); !ok || !errors.Is(e, syscall.EIO) {
		t.Fatalf("entry given up at close: %#v", out[0])
	}
	if err := <-closed; !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close during a write fault: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CleanFile)); !os.IsNotExist(err) {
		t.Fatalf("state marked clean after a failed write: %v", err)
	}
	f2, err := NewFSM(dir, testVerify)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if f2.View().AppliedIndex != 0 {
		t.Fatal("an unclean state file was trusted")
	}
}

// The default backoff waits a bounded time and stops waiting when Close begins.
func TestRetryWaitBoundedAndStopsOnClose(t *testing.T) {
	h := newHarness(t)
	for _, a := range []int{0, 5, 60} {
		if d := retryDelay(a); d <= 0 || d > maxRetryDelay {
			t.Fatalf("retryDelay(%d) = %v", a, d)
		}
	}
	h.f.beginClose()
	if h.f.retryWait(1000) {
		t.Fatal("retryWait after Close began says retry")
	}
}

// corruptValue overwrites a stored value in state.db with garbage, as a flipped bit
// would.
func corruptValue(t *testing.T, f *FSM, bucket []byte, key []byte) {
	t.Helper()
	err := f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, []byte{0xff, 0xff, 0xff}) })
	if err != nil {
		t.Fatal(err)
	}
}

// A corrupt stored value halts the FSM, never a panic; the fault names state.db and the
// key; the state file is not marked clean on Close (so it is rebuilt).
func TestCorruptStoredValueHalts(t *testing.T) {
	cases := []struct {
		name   string
		bucket []byte
		key    func(h *harness) []byte
		entry  func(h *harness) Entry
		says   string
	}{
		{"dedupe entry", bDedupe, func(*harness) []byte { return []byte("i1") },
			func(*harness) Entry { return one(put("i1", "c/1", "v1")) }, `dedupe/"i1"`},
		{"pending intent", bPending, func(*harness) []byte { return u64key(0) },
			func(h *harness) Entry { return CommitEntry{Raw: commitRaw(h, nil)} }, "pending/0"},
		{"meta", bMeta, func(*harness) []byte { return keyState },
			func(*harness) Entry { return one(put("x", "c/1", "v")) }, "meta/state"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := NewFSM(dir, testVerify)
			if err != nil {
				t.Fatal(err)
			}
			h := &harness{t: t, f: f}
			heldWithPending(h)
			var e Entry
			if tc.entry != nil {
				e = tc.entry(h) // built before the corruption
			}
			corruptValue(t, f, tc.bucket, tc.key(h))
			out := f.Apply(&raft.Log{Index: h.idx + 1, Type: raft.LogCommand, Data: mustEncode(t, e)})
			err, _ = out.(error)
			var fe *FaultError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &fe) || !fe.Halted || fe.File != StateFile {
				t.Fatalf("apply over a corrupt %s: %#v", tc.name, out)
			}
			if !strings.Contains(err.Error(), "state.db") || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("fault %q does not name state.db and %s", err, tc.says)
			}
			if f.View().AppliedIndex != h.idx {
				t.Fatal("applied index moved")
			}
			if err := f.Close(); err == nil {
				t.Fatal("Close of a state with a corrupt value reports nothing")
			}
			if _, err := os.Stat(filepath.Join(dir, CleanFile)); !os.IsNotExist(err) {
				t.Fatal("a corrupt state was marked clean")
			}
		})
	}
}

// Any panic inside the apply (a broken invariant, or bbolt tripping over a damaged
// page) halts the FSM with a fault rather than crashing the process.
func TestPanicInApplyHalts(t *testing.T) {
	h := newHarness(t)
	held(h)
	h.f.verify = func([]byte) (CommitInfo, error) { return CommitInfo{}, nil } // recovered by verifySafely: not this
	real := h.f.update
	h.f.update = func(fn func(*bolt.Tx) error) error {
		return real(func(tx *bolt.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			var m map[string]int
			m["boom"]++ // a bug after the apply: must not take the process down
			return nil
		})
	}
	out := h.f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, one(put("x", "c/1", "v")))})
	err, _ := out.(error)
	if err == nil || !strings.Contains(fmt.Sprint(err), "assignment to entry in nil map") {
		t.Fatalf("apply with a panic: %#v", out)
	}
	if h.f.Fault() == nil || h.f.View().AppliedIndex != 1 {
		t.Fatal("panic did not halt the FSM")
	}
}

// Log.Close during a write fault does not hang (Raft's shutdown waits for the apply,
// which the retries would block) and reports the fault.
func TestLogCloseDuringWriteFault(t *testing.T) {
	c := newCluster(t, 1, nil)
	nd := c.leader()
	l := nd.log
	c.propose(one(put("a", "c/1", "v")))
	f := l.fsm
	retrying := make(chan struct{}, 1)
	real := f.update
	f.update = func(fn func(*bolt.Tx) error) error {
		_ = real(func(tx *bolt.Tx) error { _ = fn(tx); return errRollback })
		return syscall.ENOSPC
	}
	realWait := f.retryWait
	f.retryWait = func(n int) bool {
		select {
		case retrying <- struct{}{}:
		default:
		}
		return realWait(n)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = l.Propose(ctx, one(put("b", "c/2", "v")))
	}()
	<-retrying
	if !errors.Is(l.Fault(), syscall.ENOSPC) {
		t.Fatalf("Fault() = %v", l.Fault())
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Close during a write fault: %v", err)
		}
	case <-time.After(30 * time.Second): // a hang detector, not synchronisation
		t.Fatal("Close hung during a write fault")
	}
	nd.log = nil
	if _, err := os.Stat(filepath.Join(nd.dir, CleanFile)); !os.IsNotExist(err) {
		t.Fatal("state marked clean")
	}
}
