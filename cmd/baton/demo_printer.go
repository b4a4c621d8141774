package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// demoPrinter prints the demo's lines in the order their events happened. The lines
// come from several goroutines (the story, the cluster's event and hold callbacks,
// the head ticker), each stamped with when its event happened, and a callback can
// run after a later event was already told: one goroutine owns the output, holds
// each line back for window and prints what it holds oldest first.
type demoPrinter struct {
	w      io.Writer
	start  time.Time
	window time.Duration
	in     chan demoLine
	flush  chan chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	closed bool
}

type demoLine struct {
	at   time.Time
	text string
}

func newDemoPrinter(w io.Writer, start time.Time, window time.Duration) *demoPrinter {
	p := &demoPrinter{w: w, start: start, window: window, in: make(chan demoLine, 256),
		flush: make(chan chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// at queues a line about an event that happened at t (dropped once closed).
func (p *demoPrinter) at(t time.Time, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.in <- demoLine{at: t, text: fmt.Sprintf(format, args...)}
}

// Flush prints every line queued so far.
func (p *demoPrinter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	ack := make(chan struct{})
	p.flush <- ack
	<-ack
}

// Close prints every line queued so far and drops any later one.
func (p *demoPrinter) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.in)
	<-p.done
}

func (p *demoPrinter) run() {
	defer close(p.done)
	var held []demoLine
	tk := time.NewTicker(p.window / 4)
	defer tk.Stop()
	print := func(upTo time.Time) {
		slices.SortStableFunc(held, func(a, b demoLine) int { return a.at.Compare(b.at) })
		n := 0
		for n < len(held) && (upTo.IsZero() || !held[n].at.After(upTo)) {
			fmt.Fprintf(p.w, "[%6.2fs] %s\n", held[n].at.Sub(p.start).Seconds(), held[n].text)
			n++
		}
		held = slices.Delete(held, 0, n)
	}
	for {
		select {
		case l, ok := <-p.in:
			if !ok {
				print(time.Time{})
				return
			}
			held = append(held, l)
		case ack := <-p.flush:
			for len(p.in) > 0 {
				held = append(held, <-p.in)
			}
			print(time.Time{})
			close(ack)
		case <-tk.C:
			print(time.Now().Add(-p.window))
		}
	}
}
