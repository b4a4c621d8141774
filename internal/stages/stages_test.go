package stages

import (
	"sync"
	"testing"
)

// TestRecorder: marks are kept only while a recorder runs, up to its capacity, from
// any goroutine.
func TestRecorder(t *testing.T) {
	Mark(Queued, 0, 0, 0) // off: nothing to record into
	if On() {
		t.Fatal("on without a recorder")
	}
	r := Start(100)
	if !On() {
		t.Fatal("off with a recorder")
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				Mark(StoreStart, uint64(j), uint64(j), uintptr(i+1))
			}
		}()
	}
	wg.Wait()
	evs := r.Stop()
	if len(evs) != 100 {
		t.Fatalf("%d events kept, want the capacity 100", len(evs))
	}
	Mark(Queued, 0, 0, 0)
	if On() || len(r.Stop()) != 100 {
		t.Fatal("recorded after Stop")
	}
	if StoreStart.String() != "store start" || Stage(200).String() != "?" {
		t.Fatal("names")
	}
}
