package testnet

import (
	"fmt"
	"html"
	"strings"
	"time"
)

// Page geometry (px) and the sizes that switch a report from one full timeline to an
// overview plus zoomed timelines of the worst rounds.
const (
	svgWidth    = 1300
	svgLeft     = 150 // lane labels
	svgRight    = 20
	charWidth   = 6.4 // average width of an 11 px sans-serif character
	boldWidth   = 7.2 // the same in bold, in the widest common sans (DejaVu Sans Bold)
	gapRowH     = 14  // the gap labels' rows above the lanes: 11 px text and its descenders
	fullMaxSpan = 2 * time.Minute
	fullMaxRuns = 20
	zoomRounds  = 4
	maxFindings = 200
	zoomPadding = time.Second
)

// RenderHTML renders a Suite as one self-contained HTML page (inline CSS and SVG, no
// external assets): the verdict at the top, a table of the scenarios, then per
// scenario its checker verdict, a table per fault kind and either one timeline of
// the whole drill (a small one) or an overview (failover time per fault, epochs,
// load and errors over time) and zoomed timelines of the worst rounds (a long one).
// A timeline has one lane per device (lease holds as bars coloured by epoch, down
// and paused spans hatched, Raft leader marks, faults as labelled markers with the
// TTL and the failover bound measured from them), failover gaps shaded and
// labelled, the chain's growth, and a time axis in seconds and wall-clock UTC.
func RenderHTML(s *Suite) string {
	var b strings.Builder
	verdict, cls := "PASS", "pass"
	if !s.OK {
		verdict, cls = "FAIL", "fail"
	}
	fmt.Fprintf(&b, `<!doctype html>
<html><head><meta charset="utf-8"><title>baton drill: %s</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:18px;color:#222;background:#fafafa;max-width:1340px}
h1{margin:0 0 6px 0;font-size:22px} h2{font-size:18px;margin:28px 0 6px 0} h3{font-size:15px;margin:18px 0 4px 0}
.verdict{display:inline-block;padding:4px 14px;border-radius:6px;font-weight:700;color:#fff;margin-right:10px}
.pass{background:#2e7d32} .fail{background:#c62828} .known{background:#ef6c00}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.small{font-size:12px;color:#555} svg{background:#fff;border:1px solid #ddd;display:block;margin:4px 0}
code{background:#eee;padding:1px 4px;border-radius:3px}
</style></head><body>
<h1><span class="verdict %s">%s</span>baton drill</h1>
<div class="small">%s &middot; started %s UTC &middot; %d scenario(s)</div>
`, verdict, cls, verdict, html.EscapeString(s.Command), s.Started.UTC().Format("2006-01-02 15:04:05"), len(s.Reports))
	b.WriteString("<table><tr><th>scenario</th><th>verdict</th><th>faults</th><th>commits</th><th>acked</th><th>forks</th><th>lost</th><th>dupes</th><th>invalid</th><th>equivocations</th><th>signed-but-refused</th><th>failovers</th></tr>\n")
	for i := range s.Reports {
		r := &s.Reports[i]
		fmt.Fprintf(&b, "<tr><td><a href=\"#%s\">%s</a></td><td>%s</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%s</td><td class=n>%d</td><td>%s</td></tr>\n",
			anchor(r), html.EscapeString(r.Scenario), verdictSpan(r), len(r.Rounds), r.Check.Commits, r.Check.Acked, r.Check.Forks,
			r.Check.Lost, r.Check.Dupes, r.Check.Invalid, knownCount(r, FindingEquivocation, r.Check.Equivocations), r.Check.Refused,
			html.EscapeString(failoversText(r, 3)))
	}
	b.WriteString("</table>\n")
	if len(s.Reports) > 1 {
		if sum := suiteSummary(s); len(sum.Kinds) > 0 {
			b.WriteString("<h3>All scenarios, per fault kind</h3>\n")
			kindsTable(&b, sum)
		}
	}
	for i := range s.Reports {
		renderReport(&b, &s.Reports[i])
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

func anchor(r *Report) string { return html.EscapeString(r.Scenario) }

func verdictSpan(r *Report) string {
	if r.OK {
		return `<span class="verdict pass">PASS</span>`
	}
	return `<span class="verdict fail">FAIL</span>`
}

// knownCount prints n, marked when the findings of kind are known issues.
func knownCount(r *Report, kind string, n int) string {
	for _, f := range r.Check.Findings {
		if f.Kind == kind && f.Known != "" {
			return fmt.Sprintf("%d <span class=small>(known: %s)</span>", n, html.EscapeString(f.Known))
		}
	}
	return fmt.Sprint(n)
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// epochColor gives each epoch a distinct, stable hue.
func epochColor(epoch uint64) string {
	return fmt.Sprintf("hsl(%d,65%%,52%%)", (epoch*67+200)%360)
}

// kindColors colour the fault kinds in the overview.
var kindColors = map[string]string{
	FaultKill: "#c62828", FaultPause: "#1565c0", FaultRestart: "#2e7d32", FaultChurn: "#6a1b9a",
	FaultPartition: "#ef6c00", FaultPartial: "#f9a825", FaultSkew: "#00838f", FaultRelease: "#5d4037", FaultTransfer: "#ad1457",
}

func kindColor(k string) string {
	if c, ok := kindColors[k[strings.LastIndexByte(k, '/')+1:]]; ok {
		return c
	}
	return "#555"
}

func renderReport(b *strings.Builder, r *Report) {
	fmt.Fprintf(b, "<h2 id=\"%s\">%s%s</h2>\n", anchor(r), verdictSpan(r), html.EscapeString(r.Scenario))
	how := fmt.Sprintf("%d round(s)", r.Params.Rounds)
	if r.Params.Duration > 0 {
		how = "soak for " + r.Params.Duration.String()
	}
	mode := "in-process"
	if r.Params.Procs {
		mode = "processes"
	}
	var labels []string
	for _, d := range r.Devices {
		labels = append(labels, r.label(d.Name))
	}
	fmt.Fprintf(b, "<div class=\"small\">%s &middot; TTL %s &middot; tick %s &middot; election allowance %s &middot; %s &middot; seed %d &middot; %s &middot; %s to %s UTC (%s)</div>\n",
		html.EscapeString(strings.Join(labels, ", ")), r.Params.TTL, r.Params.Tick, r.Params.Election, how, r.Seed, mode,
		r.Started.UTC().Format("15:04:05"), r.Finished.UTC().Format("15:04:05"), fmtDur(r.Finished.Sub(r.Started)))
	if r.Params.FaultFree {
		b.WriteString("<div class=\"small\">fault-free: every commit the chain key signs must be applied</div>\n")
	}
	if r.Error != "" {
		fmt.Fprintf(b, "<p><b>drill error:</b> %s</p>\n", html.EscapeString(r.Error))
	}
	checkerText(b, r)
	if len(r.Summary.Kinds) > 0 {
		kindsTable(b, r.Summary)
	}
	if small(r) {
		b.WriteString(timelineSVG(r, r.Started, r.Finished))
		failoverTable(b, r)
	} else {
		b.WriteString("<h3>Overview</h3>\n")
		b.WriteString(overviewSVG(r))
		worstTable(b, r)
		for i, rd := range r.Summary.Worst {
			if i == zoomRounds {
				break
			}
			from, to := rd.At.Add(-zoomPadding), rd.At.Add(rd.Took+zoomPadding)
			fmt.Fprintf(b, "<h3>Round %s</h3>\n", html.EscapeString(roundText(rd)))
			b.WriteString(timelineSVG(r, from, to))
		}
	}
	findingsTable(b, r)
	errs := ""
	if len(r.Counts.Errors) > 0 {
		errs = " by error: " + joinCounts(r.Counts.Errors, "%s %d", ", ")
	}
	fmt.Fprintf(b, "<div class=\"small\">load: %d submitted, %d acknowledged, %d failed (unacknowledged, allowed)%s, %d resubmitted, %d waiting when the load stopped &middot; chain: %d commits, %d intents</div>\n",
		r.Counts.Submitted, r.Counts.Acked, r.Counts.Failed, html.EscapeString(errs), r.Counts.Retried, r.Counts.Cancelled, r.Counts.Commits, r.Counts.Intents)
}

// small: one timeline of the whole drill stays readable.
func small(r *Report) bool {
	return len(r.Rounds) <= fullMaxRuns && r.Finished.Sub(r.Started) <= fullMaxSpan
}

func checkerText(b *strings.Builder, r *Report) {
	c := r.Check
	if c.Unknown() == 0 {
		b.WriteString("<p>Checker: no forks, no divergence, chain valid on every device, every acknowledged intent signed exactly once")
		if c.RaftRead && c.Equivocations == 0 {
			b.WriteString(", no commit signed twice")
		}
		b.WriteString(".</p>\n")
	} else {
		fmt.Fprintf(b, "<p><b>Checker: %d finding(s)</b> (listed below).</p>\n", c.Unknown())
	}
	t := r.Summary.Totals
	fmt.Fprintf(b, "<div class=\"small\">acked %d &middot; commits %d &middot; signed in the Raft logs %d &middot; forks %d &middot; lost %d &middot; duplicates %d &middot; invalid %d &middot; equivocations %s &middot; signed-but-refused %d%s &middot; unverified %d",
		t.Acked, t.Commits, t.Signed, t.Forks, t.Lost, t.Duplicates, t.Invalid, knownCount(r, FindingEquivocation, t.Equivocations),
		t.Refused, html.EscapeString(refusedByText(c.RefusedBy)), t.Unverified)
	if t.RaftUnread > 0 {
		fmt.Fprintf(b, " &middot; %d Raft entries compacted before they were read", t.RaftUnread)
	}
	b.WriteString("</div>\n")
	if len(r.Rejections) > 0 {
		fmt.Fprintf(b, "<div class=\"small\">entries refused by the apply's fencing (by reason): %s</div>\n", html.EscapeString(fmtRejections(r.Rejections)))
	}
}

func kindsTable(b *strings.Builder, s Summary) {
	b.WriteString("<table><tr><th>fault</th><th>count</th><th>failovers</th><th>median</th><th>p99</th><th>max</th><th>over bound</th><th>errors</th><th>signed-but-refused</th><th>catch-up median / max</th></tr>\n")
	for _, k := range s.Kinds {
		med, p99, mx, over := "-", "-", "-", "-"
		if k.Failovers > 0 {
			med, p99, mx, over = fmtDur(k.Median), fmtDur(k.P99), fmtDur(k.Max), fmt.Sprintf("%d (bound %s)", k.Over, fmtDur(k.Bound))
		}
		cu := "-"
		if k.CatchUpMax > 0 {
			cu = fmtDur(k.CatchUpMedian) + " / " + fmtDur(k.CatchUpMax)
		}
		fmt.Fprintf(b, "<tr><td><span style=\"color:%s\">&#9679;</span> %s</td><td class=n>%d</td><td class=n>%d</td><td class=n>%s</td><td class=n>%s</td><td class=n>%s</td><td>%s</td><td class=n>%d</td><td class=n>%d</td><td class=n>%s</td></tr>\n",
			kindColor(k.Kind), html.EscapeString(k.Kind), k.Count, k.Failovers, med, p99, mx, over, k.Errors, k.Refused, cu)
	}
	b.WriteString("</table>\n")
}

func failoverTable(b *strings.Builder, r *Report) {
	if len(r.Check.Failovers) == 0 {
		return
	}
	b.WriteString("<table><tr><th>failover</th><th>epochs</th><th>last seq (old)</th><th>first seq (new)</th><th>duration (last old commit &rarr; first new)</th><th>timed by</th><th>after fault</th></tr>\n")
	for i, f := range r.Check.Failovers {
		af := ""
		if f.Fault != "" {
			af = fmtDur(f.SinceFault) + " after " + f.Fault
		}
		fmt.Fprintf(b, "<tr><td class=n>%d</td><td>%d &rarr; %d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%s</td><td>%s</td><td>%s</td></tr>\n",
			i+1, f.FromEpoch, f.ToEpoch, f.LastSeq, f.FirstSeq, fmtDur(f.Duration), f.Source, html.EscapeString(af))
	}
	b.WriteString("</table>\n")
}

func worstTable(b *strings.Builder, r *Report) {
	if len(r.Summary.Worst) == 0 {
		return
	}
	fmt.Fprintf(b, "<h3>Worst %d of %d rounds</h3>\n", len(r.Summary.Worst), len(r.Rounds))
	b.WriteString("<table><tr><th>round</th><th>at (UTC)</th><th>fault</th><th>device</th><th>failover</th><th>epochs</th><th>new holder</th><th>round took</th><th>refused</th><th>error</th></tr>\n")
	for _, rd := range r.Summary.Worst {
		fo, ep := "-", ""
		if rd.Failover > 0 {
			fo, ep = fmtDur(rd.Failover), fmt.Sprintf("%d &rarr; %d", rd.FromEpoch, rd.ToEpoch)
			if rd.Over {
				fo = "<b>" + fo + " (over bound)</b>"
			}
		}
		dev := html.EscapeString(rd.Device)
		if rd.Holder {
			dev += " (holder)"
		}
		fmt.Fprintf(b, "<tr><td class=n>#%d</td><td>%s</td><td>%s</td><td>%s</td><td class=n>%s</td><td>%s</td><td>%s</td><td class=n>%s</td><td class=n>%d</td><td>%s</td></tr>\n",
			rd.N, rd.At.UTC().Format("15:04:05.000"), html.EscapeString(rd.Kind), dev, fo, ep, html.EscapeString(rd.NewHolder),
			fmtDur(rd.Took), rd.Refused, html.EscapeString(rd.Error))
	}
	b.WriteString("</table>\n")
}

func findingsTable(b *strings.Builder, r *Report) {
	fs := r.Check.Findings
	if len(fs) == 0 {
		return
	}
	fmt.Fprintf(b, "<h3>Checker findings (%d)</h3>\n", len(fs))
	b.WriteString("<table><tr><th>kind</th><th>device</th><th>seq</th><th>id</th><th>detail</th></tr>\n")
	for i, f := range fs {
		if i == maxFindings {
			fmt.Fprintf(b, "<tr><td colspan=5>&hellip; and %d more (report.json)</td></tr>\n", len(fs)-i)
			break
		}
		kind := html.EscapeString(f.Kind)
		if f.Known != "" {
			kind += " <span class=\"verdict known\" style=\"padding:0 6px\">known: " + html.EscapeString(f.Known) + "</span>"
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td class=n>%d</td><td>%s</td><td>%s</td></tr>\n", kind, html.EscapeString(f.Device), f.Seq,
			html.EscapeString(f.ID), html.EscapeString(f.Detail))
	}
	b.WriteString("</table>\n")
}

// --- time axis ---
