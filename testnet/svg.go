package testnet

// The report's drawings: the timeline and overview SVGs, their scales, axes and rows.

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
	"time"
)

var axisSteps = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	200 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second,
	10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
	15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour}

// niceStep is the smallest step that puts at most max ticks on span.
func niceStep(span time.Duration, max int) time.Duration {
	for _, s := range axisSteps {
		if span/s <= time.Duration(max) {
			return s
		}
	}
	return 24 * time.Hour
}

// fmtAxis prints an offset with exactly the precision its step needs: 1.25 s with a
// 250 ms step, 1.5 s with 500 ms, 90 s as 1m30s.
func fmtAxis(d, step time.Duration) string {
	switch {
	case step >= time.Minute:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if h > 0 {
			return fmt.Sprintf("%dh%02dm", h, m)
		}
		return fmt.Sprintf("%dm", m)
	case step >= time.Second:
		if d >= time.Minute {
			return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
		}
		return fmt.Sprintf("%ds", int(math.Round(d.Seconds())))
	}
	decimals := 1
	if step%(100*time.Millisecond) != 0 {
		decimals = 2
	}
	if step%(10*time.Millisecond) != 0 {
		decimals = 3
	}
	return fmt.Sprintf("%.*fs", decimals, d.Seconds())
}

// wallFormat is the wall-clock label layout for a step.
func wallFormat(step time.Duration) string {
	switch {
	case step >= time.Minute:
		return "15:04"
	case step >= time.Second:
		return "15:04:05"
	case step%(100*time.Millisecond) == 0:
		return "15:04:05.0"
	}
	return "15:04:05.00"
}

// scale maps a time window onto [x0, x1].
type scale struct {
	from, to time.Time
	x0, x1   float64
}

func (s scale) x(t time.Time) float64 {
	if t.Before(s.from) {
		t = s.from
	}
	if t.After(s.to) {
		t = s.to
	}
	return s.x0 + (s.x1-s.x0)*float64(t.Sub(s.from))/float64(s.to.Sub(s.from))
}

func (s scale) in(a, b time.Time) bool { return !b.Before(s.from) && !a.After(s.to) }

// axis draws vertical grid lines from top to bottom and two rows of labels under
// bottom: the offset from origin, and the UTC wall clock.
func axis(b *strings.Builder, s scale, origin time.Time, top, bottom int) {
	span := s.to.Sub(s.from)
	step := niceStep(span, 14)
	first := origin.Add(((s.from.Sub(origin) + step - 1) / step) * step)
	if s.from.Before(origin) {
		first = origin
	}
	for t := first; !t.After(s.to); t = t.Add(step) {
		xt := s.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xt, top, xt, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#444" text-anchor="middle">+%s</text><text x="%.1f" y="%d" fill="#888" text-anchor="middle">%s</text>`+"\n",
			xt, bottom+13, fmtAxis(t.Sub(origin), step), xt, bottom+26, t.UTC().Format(wallFormat(step)))
	}
	fmt.Fprintf(b, `<text x="6" y="%d" fill="#444">since start</text><text x="6" y="%d" fill="#888">UTC</text>`+"\n", bottom+13, bottom+26)
}

// rows packs labels into rows so that they do not overlap: place returns the first
// row (0..n-1) where [x, x+w] is free, or -1.
type rows struct{ ends []float64 }

func newRows(n int) *rows {
	r := &rows{ends: make([]float64, n)}
	for i := range r.ends {
		r.ends[i] = math.Inf(-1)
	}
	return r
}

func (r *rows) place(x, w float64) int {
	for i, e := range r.ends {
		if x >= e+4 {
			r.ends[i] = x + w
			return i
		}
	}
	return -1
}

func textWidth(s string) float64 { return charWidth * float64(len([]rune(s))) }

// --- the lanes timeline ---

// laneFault marks the faults that take a holder away: the TTL and the failover bound
// are drawn from them.
var laneFault = map[string]bool{EventKill: true, EventPause: true, EventStop: true, EventLeave: true}

// timelineSVG draws the devices' lanes and the chain's growth over [from, to].
func timelineSVG(r *Report, from, to time.Time) string {
	const (
		top     = 64 // room for the legend and three rows of gap labels under it
		laneH   = 50
		growthH = 110
	)
	if from.Before(r.Started) {
		from = r.Started
	}
	if to.After(r.Finished) && r.Finished.After(from) {
		to = r.Finished
	}
	if !to.After(from) {
		to = from.Add(time.Second)
	}
	s := scale{from: from, to: to, x0: svgLeft, x1: svgWidth - svgRight}
	plotW := s.x1 - s.x0
	lanes := map[string]int{}
	for i, d := range r.Devices {
		lanes[d.Name] = i
	}
	n := len(r.Devices)
	lanesBottom := top + n*laneH
	gTop := lanesBottom + 22
	height := gTop + growthH + 34
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", svgWidth, height, svgWidth, height)
	b.WriteString(`<defs><pattern id="down" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#e0e0e0"/><line x1="0" y1="0" x2="0" y2="6" stroke="#9e9e9e" stroke-width="2"/></pattern>` +
		`<pattern id="paused" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="6" height="6" fill="#e3f2fd"/><line x1="0" y1="0" x2="0" y2="6" stroke="#90caf9" stroke-width="2"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="13" fill="#333">bars: lease held (colour = epoch) &#183; hatched grey: down &#183; hatched blue: paused &#183; &#9650; Raft leader &#183; &#9670; fault, then |TTL and |bound after it &#183; shaded: failover gap &#183; line: chain seq</text>`+"\n", svgLeft)
	// Failover gaps, shaded across the lanes and the growth panel; their labels in
	// up to three rows above the lanes, dropped (the table has them) when no row
	// has room.
	gapRows := newRows(3)
	for _, f := range r.Check.Failovers {
		if !s.in(f.LastAt, f.FirstAt) {
			continue
		}
		x0, x1 := s.x(f.LastAt), s.x(f.FirstAt)
		if x1-x0 < 1 {
			x1 = x0 + 1
		}
		title := fmt.Sprintf("e%d→e%d: %s from the last commit of e%d to the first of e%d", f.FromEpoch, f.ToEpoch, fmtDur(f.Duration), f.FromEpoch, f.ToEpoch)
		if f.Fault != "" {
			title += fmt.Sprintf("; %s after %s", fmtDur(f.SinceFault), f.Fault)
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#ffcdd2" opacity="0.55"><title>%s</title></rect>`+"\n",
			x0, top-4, x1-x0, gTop+growthH-top+4, html.EscapeString(title))
		label := fmtDur(f.Duration)
		if f.Fault != "" {
			label += " (" + fmtDur(f.SinceFault) + " after fault)"
		}
		w := boldWidth * float64(len([]rune(label)))
		lx := math.Max(s.x0, math.Min((x0+x1)/2-w/2, s.x1-w))
		if row := gapRows.place(lx, w); row >= 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#b71c1c" font-weight="bold">%s<title>%s</title></text>`+"\n", lx, top-8-row*gapRowH, html.EscapeString(label), html.EscapeString(title))
		}
	}
	// Lanes.
	for i, d := range r.Devices {
		y := top + i*laneH
		fill := "#f7f7f7"
		if i%2 == 1 {
			fill = "#efefef"
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="%.0f" height="%d" fill="%s"/>`+"\n", s.x0, y, plotW, laneH, fill)
		id := ""
		if d.ID != "" {
			id = "(" + shortID(d.ID) + ")"
		}
		fmt.Fprintf(&b, `<text x="6" y="%d" fill="#222"><tspan font-weight="bold">%s</tspan> <tspan fill="#777">%s</tspan><title>%s</title></text>`+"\n",
			y+28, html.EscapeString(d.Name), html.EscapeString(id), html.EscapeString(d.ID))
	}
	for _, sp := range r.Downs {
		i, ok := lanes[sp.Device]
		if !ok || !s.in(sp.From, sp.To) {
			continue
		}
		y := top + i*laneH + 12
		x0, x1 := s.x(sp.From), s.x(sp.To)
		fill := "url(#down)"
		if sp.State == SpanPaused {
			fill = "url(#paused)"
		}
		dash := ""
		if sp.State == SpanLeft {
			dash = ` stroke="#9e9e9e" stroke-dasharray="3 2"`
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s><title>%s %s for %s (%s)</title></rect>`+"\n",
			x0, y, math.Max(x1-x0, 1), laneH-24, fill, dash, html.EscapeString(r.label(sp.Device)), sp.State, fmtDur(sp.To.Sub(sp.From)), html.EscapeString(sp.Cause))
		if x1-x0 > 40 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#555">%s</text>`+"\n", x0+4, y+16, sp.State)
		}
	}
	for _, sp := range r.Holds {
		i, ok := lanes[sp.Device]
		if !ok || !s.in(sp.From, sp.To) {
			continue
		}
		y := top + i*laneH + 14
		x0, x1 := s.x(sp.From), s.x(sp.To)
		if x1-x0 < 1.5 {
			x1 = x0 + 1.5
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="3" fill="%s"><title>%s held epoch %d for %s from %s UTC</title></rect>`+"\n",
			x0, y, x1-x0, laneH-28, epochColor(sp.Epoch), html.EscapeString(r.label(sp.Device)), sp.Epoch, fmtDur(sp.To.Sub(sp.From)), sp.From.UTC().Format("15:04:05.000"))
		if x1-x0 > 30 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#fff" font-weight="bold">e%d</text>`+"\n", x0+4, y+15, sp.Epoch)
		}
	}
	for _, m := range r.Leaders {
		i, ok := lanes[m.Device]
		if !ok || !s.in(m.At, m.At) {
			continue
		}
		y := top + i*laneH + 2
		fmt.Fprintf(&b, `<path d="M%.1f %d l-5 9 h10 z" fill="#1565c0"><title>%s became Raft leader at %s UTC</title></path>`+"\n",
			s.x(m.At), y, html.EscapeString(r.label(m.Device)), m.At.UTC().Format("15:04:05.000"))
	}
	// Faults: markers on the device's lane with labels packed into two rows; the TTL
	// and the failover bound measured from a fault that took a device away;
	// cluster-wide events as dashed lines with their labels under the lanes.
	laneRows := map[int]*rows{}
	netRows := newRows(2)
	for _, e := range r.Events {
		if !s.in(e.At, e.At) {
			continue
		}
		xe := s.x(e.At)
		i, ok := lanes[e.Device]
		if !ok {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#6a1b9a" stroke-dasharray="4 3"><title>%s at %s UTC</title></line>`+"\n",
				xe, top, xe, lanesBottom, html.EscapeString(e.Label), e.At.UTC().Format("15:04:05.000"))
			if e.Kind == EventPartition {
				ttlMarks(&b, s, r, e, top, lanesBottom, "#6a1b9a")
			}
			if row := netRows.place(xe+3, textWidth(e.Label)); row >= 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#6a1b9a">%s</text>`+"\n", xe+3, lanesBottom+11+row*11, html.EscapeString(e.Label))
			}
			continue
		}
		y := top + i*laneH + laneH - 7
		col := "#c62828"
		switch e.Kind {
		case EventRestart, EventResume, EventHeal, EventJoin:
			col = "#2e7d32"
		case EventSkew, EventDrift, EventNote:
			col = "#ef6c00"
		case EventRelease, EventTransfer:
			col = "#5d4037"
		}
		if laneFault[e.Kind] {
			ttlMarks(&b, s, r, e, top+i*laneH, top+(i+1)*laneH, col)
		}
		fmt.Fprintf(&b, `<path d="M%.1f %d l5 -5 l5 5 l-5 5 z" fill="%s" stroke="#fff"><title>%s at %s UTC</title></path>`+"\n",
			xe-5, y, col, html.EscapeString(e.Label), e.At.UTC().Format("15:04:05.000"))
		lr := laneRows[i]
		if lr == nil {
			lr = newRows(2)
			laneRows[i] = lr
		}
		if row := lr.place(xe+7, textWidth(e.Label)); row >= 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="%s">%s</text>`+"\n", xe+7, y-1-row*24, col, html.EscapeString(e.Label))
		}
	}
	growthPanel(&b, r, s, gTop, growthH)
	axis(&b, s, r.Started, top, gTop+growthH)
	b.WriteString("</svg>\n")
	return b.String()
}

// ttlMarks draws, from a fault e that can take the holder away, a thin line to the
// failover bound and two short verticals between y0 and y1: at TTL (grey, "TTL")
// and at the bound TTL + tick + one election (red, "bound"). A takeover that lands
// left of "bound" kept the design's promise.
func ttlMarks(b *strings.Builder, s scale, r *Report, e Event, y0, y1 int, col string) {
	if r.Params.TTL <= 0 {
		return
	}
	bound := r.Params.TTL + r.Params.Tick + r.Params.Election
	xe, xt, xb := s.x(e.At), s.x(e.At.Add(r.Params.TTL)), s.x(e.At.Add(bound))
	ym := y1 - 14
	fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-opacity="0.45"/>`+"\n", xe, ym, xb, ym, col)
	for _, m := range []struct {
		x     float64
		col   string
		label string
		title string
	}{{xt, "#424242", "TTL", fmt.Sprintf("TTL %s after %s", r.Params.TTL, e.Label)},
		{xb, "#c62828", "bound", fmt.Sprintf("failover bound (TTL + tick + election = %s) after %s", fmtDur(bound), e.Label)}} {
		if m.x >= s.x1 {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="3 2"><title>%s</title></line>`+
			`<text x="%.1f" y="%d" fill="%s" font-size="9">%s</text>`+"\n",
			m.x, y0+3, m.x, y1-3, m.col, html.EscapeString(m.title), m.x+2, y0+10, m.col, m.label)
	}
}

// growthPanel draws the chain's highest seq over the window as a step line.
func growthPanel(b *strings.Builder, r *Report, s scale, gTop, growthH int) {
	fmt.Fprintf(b, `<rect x="%.0f" y="%d" width="%.0f" height="%d" fill="#fcfcfc" stroke="#ddd"/>`+"\n", s.x0, gTop, s.x1-s.x0, growthH)
	var pts []Point
	var before uint64
	for _, p := range r.Growth {
		switch {
		case p.At.Before(s.from):
			before = max(before, p.Seq)
		case !p.At.After(s.to):
			pts = append(pts, p)
		}
	}
	lo, hi := before, before+1
	for _, p := range pts {
		hi = max(hi, p.Seq)
	}
	fmt.Fprintf(b, `<text x="6" y="%d" fill="#222" font-weight="bold">chain seq</text><text x="6" y="%d" fill="#777">%d .. %d</text>`+"\n", gTop+20, gTop+34, lo, hi)
	gy := func(seq uint64) float64 {
		return float64(gTop+growthH-4) - float64(growthH-8)*float64(seq-lo)/float64(hi-lo)
	}
	path := []string{fmt.Sprintf("%.1f,%.1f", s.x0, gy(before))}
	last := before
	for _, p := range pts {
		x := s.x(p.At)
		path = append(path, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x, gy(last), x, gy(p.Seq)))
		last = p.Seq
	}
	end := s.to
	if end.After(r.Finished) {
		end = r.Finished
	}
	path = append(path, fmt.Sprintf("%.1f,%.1f", s.x(end), gy(last)))
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="#2e7d32" stroke-width="2"/>`+"\n", strings.Join(path, " "))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#2e7d32" text-anchor="end">seq %d</text>`+"\n", s.x(end)-4, math.Max(gy(last)-4, float64(gTop+12)), last)
}

// --- the overview of a long drill ---

// overviewSVG draws, on one wall-clock axis: the failover time of every round (a dot
// per round that moved the lease, coloured by fault kind, against the TTL and the
// bound; a tick per round that did not; a cross per round that failed), the epoch of
// the chain's head, and the load's acknowledgements and failures per second.
func overviewSVG(r *Report) string {
	const (
		top   = 34
		foH   = 200
		gap   = 26
		epH   = 80
		loadH = 110
	)
	s := scale{from: r.Started, to: r.Finished, x0: svgLeft, x1: svgWidth - svgRight}
	if !s.to.After(s.from) {
		s.to = s.from.Add(time.Second)
	}
	foTop, epTop := top, top+foH+gap
	loadTop := epTop + epH + gap
	bottom := loadTop + loadH
	height := bottom + 34
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", svgWidth, height, svgWidth, height)
	// Legend: the fault kinds present.
	lx := s.x0
	seen := map[string]bool{}
	for _, rd := range r.Rounds {
		if seen[rd.Kind] {
			continue
		}
		seen[rd.Kind] = true
	}
	var kinds []string
	for k := range seen {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="10" r="4" fill="%s"/><text x="%.1f" y="14" fill="#333">%s</text>`+"\n", lx+4, kindColor(k), lx+11, html.EscapeString(k))
		lx += 20 + textWidth(k)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="14" fill="#777">&#183; tick at 0: the lease did not move &#183; &#10005;: round failed</text>`+"\n", lx+6)

	// Panel 1: failover per round, on a square-root scale so that tens of
	// milliseconds and seconds both stay readable.
	bound := r.Params.TTL + r.Params.Tick + r.Params.Election
	ymax := 2 * (r.Params.TTL + bound)
	for _, rd := range r.Rounds {
		ymax = max(ymax, rd.Failover)
	}
	ymax = niceCeil(ymax)
	fy := func(d time.Duration) float64 {
		return float64(foTop+foH) - float64(foH-6)*math.Sqrt(float64(d)/float64(ymax))
	}
	panel(&b, s, foTop, foH, "failover", "per fault (√ scale)")
	for _, t := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second,
		10 * time.Second, 20 * time.Second, time.Minute} {
		if t > ymax || (t > 0 && fy(t) > float64(foTop+foH)-10) {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" fill="#777" text-anchor="end">%s</text>`+"\n",
			s.x0, fy(t), s.x1, fy(t), s.x0-4, fy(t)+4, fmtDur(t))
	}
	var placed [][2]float64 // label extents, so that close lines' labels do not overlap
	for _, ref := range []struct {
		d     time.Duration
		label string
		col   string
	}{{r.Params.TTL + bound, "skew bound " + fmtDur(r.Params.TTL+bound), "#e57373"}, {bound, "bound " + fmtDur(bound), "#b71c1c"}, {r.Params.TTL, "TTL " + fmtDur(r.Params.TTL), "#555"}} {
		if ref.d <= 0 || ref.d > ymax {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="%s" stroke-dasharray="5 3"/>`+"\n", s.x0, fy(ref.d), s.x1, fy(ref.d), ref.col)
		// Labels right-aligned, moved left of an earlier one they would overlap.
		w := textWidth(ref.label)
		x := s.x1 - 4 - w
		for _, p := range placed {
			if x < p[1]+6 && x+w > p[0]-6 {
				x = p[0] - 12 - w
			}
		}
		placed = append(placed, [2]float64{x, x + w})
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="%s">%s</text>`+"\n", x, fy(ref.d)-3, ref.col, ref.label)
	}
	for _, rd := range r.Rounds {
		x := s.x(rd.At)
		title := html.EscapeString(roundText(rd))
		switch {
		case rd.Error != "":
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#c62828" text-anchor="middle" font-weight="bold">&#10005;<title>%s</title></text>`+"\n", x, foTop+12, title)
		case rd.Failover > 0:
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.8"><title>%s</title></circle>`+"\n", x, fy(rd.Failover), kindColor(rd.Kind), title)
		default:
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-opacity="0.6"><title>%s</title></line>`+"\n", x, foTop+foH, x, foTop+foH-5, kindColor(rd.Kind), title)
		}
	}

	// Panel 2: the head's epoch over time (a step line, one point per pixel).
	panel(&b, s, epTop, epH, "epoch", "of the head")
	pts := perPixel(r.Growth, s)
	var maxEp uint64 = 1
	for _, p := range pts {
		maxEp = max(maxEp, p.Epoch)
	}
	ey := func(e uint64) float64 { return float64(epTop+epH-3) - float64(epH-6)*float64(e)/float64(maxEp) }
	if len(pts) > 0 {
		var path []string
		var last uint64
		for _, p := range pts {
			x := s.x(p.At)
			path = append(path, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x, ey(last), x, ey(p.Epoch)))
			last = p.Epoch
		}
		path = append(path, fmt.Sprintf("%.1f,%.1f", s.x1, ey(last)))
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#6a1b9a" stroke-width="1.5"/>`+"\n", strings.Join(path, " "))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="#777" text-anchor="end">%d</text><text x="%.0f" y="%.1f" fill="#777" text-anchor="end">0</text>`+"\n", s.x0-4, ey(maxEp)+4, maxEp, s.x0-4, ey(0)+4)

	// Panel 3: load per second, acknowledged up, failed down.
	panel(&b, s, loadTop, loadH, "load", "acked / failed per s")
	var maxAck, maxFail float64 = 1, 1
	var width time.Duration = time.Second
	if len(r.Load) > 1 {
		width = r.Load[1].At.Sub(r.Load[0].At)
	}
	for _, lb := range r.Load {
		maxAck = math.Max(maxAck, float64(lb.Acked)/width.Seconds())
		maxFail = math.Max(maxFail, float64(lb.Failed)/width.Seconds())
	}
	mid := float64(loadTop) + float64(loadH)*0.7
	for _, lb := range r.Load {
		x0, x1 := s.x(lb.At), s.x(lb.At.Add(width))
		if a := float64(lb.Acked) / width.Seconds(); a > 0 {
			h := (mid - float64(loadTop) - 4) * a / maxAck
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#81c784"><title>%s UTC: %d acked</title></rect>`+"\n", x0, mid-h, math.Max(x1-x0-0.3, 0.5), h, lb.At.UTC().Format("15:04:05"), lb.Acked)
		}
		if f := float64(lb.Failed) / width.Seconds(); f > 0 {
			h := (float64(loadTop+loadH) - mid - 3) * f / maxFail
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#e57373"><title>%s UTC: %d failed</title></rect>`+"\n", x0, mid, math.Max(x1-x0-0.3, 0.5), h, lb.At.UTC().Format("15:04:05"), lb.Failed)
		}
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#999"/>`+"\n", s.x0, mid, s.x1, mid)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" fill="#388e3c" text-anchor="end">%.0f/s</text><text x="%.0f" y="%d" fill="#d32f2f" text-anchor="end">%.0f/s</text>`+"\n",
		s.x0-4, loadTop+10, maxAck, s.x0-4, loadTop+loadH, maxFail)
	axis(&b, s, r.Started, foTop, bottom)
	b.WriteString("</svg>\n")
	return b.String()
}

// panel draws a panel's frame and its two-line label.
func panel(b *strings.Builder, s scale, top, h int, name, sub string) {
	fmt.Fprintf(b, `<rect x="%.0f" y="%d" width="%.0f" height="%d" fill="#fcfcfc" stroke="#ddd"/>`+"\n", s.x0, top, s.x1-s.x0, h)
	fmt.Fprintf(b, `<text x="6" y="%d" fill="#222" font-weight="bold">%s</text><text x="6" y="%d" fill="#777">%s</text>`+"\n", top+16, name, top+30, sub)
}

// perPixel keeps the last point of each pixel column (and every epoch change).
func perPixel(ps []Point, s scale) []Point {
	var out []Point
	lastX := -1
	for _, p := range ps {
		x := int(s.x(p.At))
		n := len(out)
		if n > 0 && x == lastX && out[n-1].Epoch == p.Epoch {
			out[n-1] = p
			continue
		}
		out = append(out, p)
		lastX = x
	}
	return out
}

// niceCeil rounds d up to 1, 2 or 5 times a power of ten milliseconds.
func niceCeil(d time.Duration) time.Duration {
	ms := float64(d.Milliseconds())
	if ms <= 0 {
		return time.Second
	}
	p := math.Pow(10, math.Floor(math.Log10(ms)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= ms {
			return time.Duration(m*p) * time.Millisecond
		}
	}
	return d
}
