package main

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDemoPrinterOrders: lines told concurrently and late (a hold callback after the
// kill it preceded) come out in the order their events happened, stamped with their
// own time.
func TestDemoPrinterOrders(t *testing.T) {
	var out strings.Builder
	start := time.Now()
	p := newDemoPrinter(&out, start, 200*time.Millisecond)
	var wg sync.WaitGroup
	for _, ms := range []int{900, 100, 500, 300, 700, 200, 800, 400, 600} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.at(start.Add(time.Duration(ms)*time.Millisecond), "event %d", ms)
		}()
	}
	wg.Wait()
	p.Close()
	p.at(start, "after close") // dropped, never printed into what follows
	re := regexp.MustCompile(`^\[\s*([0-9.]+)s\] event (\d+)$`)
	var got []int
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected line %q in\n%s", l, out.String())
		}
		ms, _ := strconv.Atoi(m[2])
		if m[1] != strconv.FormatFloat(float64(ms)/1000, 'f', 2, 64) {
			t.Errorf("line %q: stamped with the print time, not the event's", l)
		}
		got = append(got, ms)
	}
	if len(got) != 9 || !slices.IsSorted(got) {
		t.Fatalf("lines out of order: %v\n%s", got, out.String())
	}
}
