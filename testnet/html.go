package testnet

import (
	"fmt"
	"html"
	"sort"
	"strings"
	"time"
)

// RenderHTML renders a Suite as one self-contained HTML page (inline CSS and SVG, no
// external assets): the verdict at the top, then per scenario a timeline with one lane
// per device (lease holds as bars coloured by epoch, Raft leader marks, faults as
// labelled markers), failover gaps shaded and labelled with their durations, the
// chain's growth as a line of seq over time, the checker's findings and the counts.
func RenderHTML(s *Suite) string {
	var b strings.Builder
	verdict, cls := "PASS", "pass"
	if !s.OK {
		verdict, cls = "FAIL", "fail"
	}
	fmt.Fprintf(&b, `<!doctype html>
<html><head><meta charset="utf-8"><title>baton drill: %s</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:18px;color:#222;background:#fafafa}
h1{margin:0 0 6px 0;font-size:22px} h2{font-size:18px;margin:26px 0 6px 0}
.verdict{display:inline-block;padding:4px 14px;border-radius:6px;font-weight:700;color:#fff;margin-right:10px}
.pass{background:#2e7d32} .fail{background:#c62828}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
.small{font-size:12px;color:#555} svg{background:#fff;border:1px solid #ddd}
code{background:#eee;padding:1px 4px;border-radius:3px}
</style></head><body>
<h1><span class="verdict %s">%s</span>baton drill</h1>
<div class="small">%s &middot; started %s &middot; %d scenario(s)</div>
`, verdict, cls, verdict, html.EscapeString(s.Command), s.Started.UTC().Format(time.RFC3339), len(s.Reports))
	b.WriteString("<table><tr><th>scenario</th><th>verdict</th><th>commits</th><th>intents</th><th>acked</th><th>forks</th><th>lost</th><th>dupes</th><th>invalid</th><th>failovers (durations)</th></tr>\n")
	for _, r := range s.Reports {
		v, c := "PASS", "pass"
		if !r.OK {
			v, c = "FAIL", "fail"
		}
		var ds []string
		for _, f := range r.Check.Failovers {
			ds = append(ds, failoverText(f))
		}
		fmt.Fprintf(&b, "<tr><td><a href=\"#%s\">%s</a></td><td><span class=\"verdict %s\">%s</span></td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d (%s)</td></tr>\n",
			html.EscapeString(r.Scenario), html.EscapeString(r.Scenario), c, v, r.Counts.Commits, r.Counts.Intents, r.Counts.Acked,
			r.Check.Forks, r.Check.Lost, r.Check.Dupes, r.Check.Invalid, len(r.Check.Failovers), strings.Join(ds, ", "))
	}
	b.WriteString("</table>\n")
	for i := range s.Reports {
		renderReport(&b, &s.Reports[i])
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// epochColor gives each epoch a distinct, stable hue.
func epochColor(epoch uint64) string {
	return fmt.Sprintf("hsl(%d,65%%,55%%)", (epoch*67+200)%360)
}

func renderReport(b *strings.Builder, r *Report) {
	v, c := "PASS", "pass"
	if !r.OK {
		v, c = "FAIL", "fail"
	}
	fmt.Fprintf(b, "<h2 id=\"%s\"><span class=\"verdict %s\">%s</span>%s</h2>\n", html.EscapeString(r.Scenario), c, v, html.EscapeString(r.Scenario))
	fmt.Fprintf(b, "<div class=\"small\">%d devices &middot; TTL %s &middot; tick %s &middot; %d round(s) &middot; seed %d &middot; %s &middot; %s</div>\n",
		r.Params.Nodes, r.Params.TTL, r.Params.Tick, r.Params.Rounds, r.Seed, map[bool]string{true: "processes", false: "in-process"}[r.Params.Procs],
		fmtDur(r.Finished.Sub(r.Started)))
	if r.Error != "" {
		fmt.Fprintf(b, "<p><b>drill error:</b> %s</p>\n", html.EscapeString(r.Error))
	}
	b.WriteString(timelineSVG(r))
	if len(r.Check.Findings) == 0 {
		b.WriteString("<p>Checker: no forks, no divergence, chain valid on every device, every acknowledged intent signed exactly once.</p>\n")
	} else {
		b.WriteString("<p><b>Checker findings:</b></p><table><tr><th>kind</th><th>device</th><th>seq</th><th>id</th><th>detail</th></tr>\n")
		for _, f := range r.Check.Findings {
			fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%s</td></tr>\n", html.EscapeString(f.Kind), html.EscapeString(f.Device), f.Seq, html.EscapeString(f.ID), html.EscapeString(f.Detail))
		}
		b.WriteString("</table>\n")
	}
	if len(r.Check.Failovers) > 0 {
		b.WriteString("<table><tr><th>failover</th><th>epochs</th><th>last seq (old)</th><th>first seq (new)</th><th>duration (last old commit &rarr; first new)</th><th>timed by</th><th>after fault</th></tr>\n")
		for i, f := range r.Check.Failovers {
			af := ""
			if f.Fault != "" {
				af = fmtDur(f.SinceFault) + " after " + f.Fault
			}
			fmt.Fprintf(b, "<tr><td>%d</td><td>%d &rarr; %d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", i+1, f.FromEpoch, f.ToEpoch, f.LastSeq, f.FirstSeq, fmtDur(f.Duration), f.Source, html.EscapeString(af))
		}
		b.WriteString("</table>\n")
	}
	fmt.Fprintf(b, "<div class=\"small\">load: %d submitted, %d acknowledged, %d failed (unacknowledged, allowed) &middot; chain: %d commits, %d intents</div>\n",
		r.Counts.Submitted, r.Counts.Acked, r.Counts.Failed, r.Counts.Commits, r.Counts.Intents)
	if len(r.Rejections) > 0 {
		fmt.Fprintf(b, "<div class=\"small\">entries refused by the apply's fencing (by reason): %s</div>\n", html.EscapeString(fmtRejections(r.Rejections)))
	}
}

func timelineSVG(r *Report) string {
	const (
		width    = 1300
		left     = 120
		right    = 20
		top      = 34
		laneH    = 46
		growthH  = 120
		axisH    = 26
		labelPad = 4
	)
	start, end := r.Started, r.Finished
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	span := end.Sub(start)
	plotW := float64(width - left - right)
	x := func(t time.Time) float64 {
		if t.Before(start) {
			t = start
		}
		if t.After(end) {
			t = end
		}
		return float64(left) + plotW*float64(t.Sub(start))/float64(span)
	}
	lanes := map[string]int{}
	for i, d := range r.Devices {
		lanes[d.Name] = i
	}
	n := len(r.Devices)
	lanesBottom := top + n*laneH
	gTop := lanesBottom + 16
	height := gTop + growthH + axisH + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	// Legend.
	fmt.Fprintf(&b, `<text x="%d" y="14" fill="#333">bars: lease held (colour = epoch) &#9650; Raft leader &#9670; fault &#9646; failover gap (shaded) &#8212; chain seq</text>`+"\n", left)
	// Failover gaps, shaded across all lanes and the growth panel.
	for _, f := range r.Check.Failovers {
		x0, x1 := x(f.LastAt), x(f.FirstAt)
		if x1-x0 < 1 {
			x1 = x0 + 1
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#ffcdd2" opacity="0.6"/>`+"\n", x0, top-6, x1-x0, gTop+growthH-top+6)
		label := fmtDur(f.Duration)
		if f.Fault != "" {
			label += " (" + fmtDur(f.SinceFault) + " after fault)"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#b71c1c" text-anchor="middle" font-weight="bold">%s</text>`+"\n", (x0+x1)/2, top-8, html.EscapeString(label))
	}
	// Lanes.
	for i, d := range r.Devices {
		y := top + i*laneH
		fill := "#f5f5f5"
		if i%2 == 1 {
			fill = "#eeeeee"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="%s"/>`+"\n", left, y, plotW, laneH, fill)
		id := d.ID
		if len(id) > 10 {
			id = "…" + id[len(id)-6:]
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#222" font-weight="bold">%s</text><text x="%d" y="%d" fill="#777">%s</text>`+"\n",
			6, y+20, html.EscapeString(d.Name), 6, y+34, html.EscapeString(id))
	}
	for _, s := range r.Holds {
		i, ok := lanes[s.Device]
		if !ok {
			continue
		}
		y := top + i*laneH + 14
		x0, x1 := x(s.From), x(s.To)
		if x1-x0 < 1.5 {
			x1 = x0 + 1.5
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="3" fill="%s"><title>%s held epoch %d, %s</title></rect>`+"\n",
			x0, y, x1-x0, laneH-22, epochColor(s.Epoch), html.EscapeString(s.Device), s.Epoch, fmtDur(s.To.Sub(s.From)))
		if x1-x0 > 34 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#fff" font-weight="bold">e%d</text>`+"\n", x0+labelPad, y+15, s.Epoch)
		}
	}
	for _, m := range r.Leaders {
		i, ok := lanes[m.Device]
		if !ok {
			continue
		}
		y := top + i*laneH + 2
		xm := x(m.At)
		fmt.Fprintf(&b, `<path d="M%.1f %d l-5 10 h10 z" fill="#1565c0"><title>%s became Raft leader</title></path>`+"\n", xm, y, html.EscapeString(m.Device))
	}
	// Faults: markers on the device lane; cluster-wide events as a dashed line.
	labelRow := map[int]float64{} // lane -> x of the last label, to stagger overlapping labels
	for _, e := range r.Events {
		xe := x(e.At)
		i, ok := lanes[e.Device]
		if !ok {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#6a1b9a" stroke-dasharray="4 3"/>`+"\n", xe, top, xe, lanesBottom)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#6a1b9a">%s</text>`+"\n", xe+3, lanesBottom+11, html.EscapeString(e.Label))
			continue
		}
		y := top + i*laneH + laneH - 6
		col := "#c62828"
		switch e.Kind {
		case EventRestart, EventResume, EventHeal, EventJoin:
			col = "#2e7d32"
		case EventSkew, EventDrift, EventNote:
			col = "#ef6c00"
		}
		fmt.Fprintf(&b, `<path d="M%.1f %d l5 -5 l5 5 l-5 5 z" fill="%s" stroke="#fff"><title>%s</title></path>`+"\n", xe-5, y, col, html.EscapeString(e.Label))
		ly := y - 1
		if last, seen := labelRow[i]; seen && xe-last < 90 {
			ly = y - 28
		}
		labelRow[i] = xe
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="%s">%s</text>`+"\n", xe+7, ly, col, html.EscapeString(e.Label))
	}
	// Chain growth.
	var maxSeq uint64 = 1
	for _, p := range r.Growth {
		if p.Seq > maxSeq {
			maxSeq = p.Seq
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="#fcfcfc" stroke="#ddd"/>`+"\n", left, gTop, plotW, growthH)
	fmt.Fprintf(&b, `<text x="6" y="%d" fill="#222" font-weight="bold">chain seq</text><text x="6" y="%d" fill="#777">0 .. %d</text>`+"\n", gTop+20, gTop+34, maxSeq)
	if len(r.Growth) > 0 {
		pts := make([]string, 0, len(r.Growth)+1)
		gy := func(seq uint64) float64 {
			return float64(gTop+growthH-4) - float64(growthH-8)*float64(seq)/float64(maxSeq)
		}
		sorted := append([]Point(nil), r.Growth...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
		var last uint64
		for _, p := range sorted {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(p.At), gy(last), x(p.At), gy(p.Seq)))
			last = p.Seq
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(end), gy(last)))
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#2e7d32" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#2e7d32" text-anchor="end">seq %d</text>`+"\n", x(end)-4, gy(last)-4, last)
	}
	// Time axis.
	ay := gTop + growthH + 14
	step := niceStep(span)
	for t := time.Duration(0); t <= span; t += step {
		xt := x(start.Add(t))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/><text x="%.1f" y="%d" fill="#555" text-anchor="middle">%s</text>`+"\n",
			xt, top, xt, gTop+growthH, xt, ay, fmtAxis(t))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute} {
		if span/s <= 16 {
			return s
		}
	}
	return 10 * time.Minute
}

func fmtAxis(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	return fmt.Sprintf("%.2gs", d.Seconds())
}
