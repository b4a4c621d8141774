package testnet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleSuite(t *testing.T, ok bool) *Suite {
	b, acks := cleanChain(t)
	check := Check(CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}}})
	if !ok {
		check.Findings = append(check.Findings, Finding{Kind: FindingLost, ID: "x<1>", Detail: "planted"})
		check.Lost++
	}
	r := Report{Scenario: "kill-holder", Params: Params{Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond, Rounds: 1}, Seed: 1,
		Started: t0.Add(-time.Second), Finished: t0.Add(6 * time.Second),
		Devices: []DeviceInfo{{Name: "d0", ID: "12D3KooWabcdef"}, {Name: "d1", ID: "12D3KooWxyz"}, {Name: "d2", ID: "p"}},
		Events:  []Event{{At: t0.Add(400 * time.Millisecond), Device: "d0", Kind: EventKill, Label: "kill d0"}, {At: t0.Add(3 * time.Second), Kind: EventHeal, Label: "heal"}},
		Holds:   []Span{{Device: "d0", Epoch: 1, From: t0.Add(-500 * time.Millisecond), To: t0.Add(400 * time.Millisecond)}, {Device: "d1", Epoch: 2, From: t0.Add(1900 * time.Millisecond), To: t0.Add(6 * time.Second)}},
		Leaders: []Mark{{Device: "d0", At: t0.Add(-900 * time.Millisecond)}, {Device: "d1", At: t0.Add(time.Second)}},
		Growth:  []Point{{At: t0, Seq: 1}, {At: t0.Add(300 * time.Millisecond), Seq: 3}, {At: t0.Add(2 * time.Second), Seq: 6}},
		Downs:   []DeviceSpan{{Device: "d0", State: SpanDown, From: t0.Add(400 * time.Millisecond), To: t0.Add(3 * time.Second), Cause: "kill d0"}},
		Rounds:  []Round{{N: 1, Kind: FaultKill, Device: "d0 (…abcdef)", Holder: true, At: t0.Add(400 * time.Millisecond), Failover: 1600 * time.Millisecond, FromEpoch: 1, ToEpoch: 2, Took: 3 * time.Second}},
		Check:   check, Counts: Counts{Submitted: 13, Acked: 12, Failed: 1}}
	r.Finish()
	return &Suite{Command: "baton drill --scenario kill-holder", Started: r.Started, Reports: []Report{r}}
}

func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	s := sampleSuite(t, true)
	if err := s.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	if !s.OK {
		t.Fatal("clean suite not OK")
	}
	js, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Suite
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Reports) != 1 || back.Reports[0].Check.Commits != 6 || len(back.Reports[0].Check.Failovers) != 2 || !back.OK {
		t.Fatalf("json round trip: %+v", back)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	h := string(page)
	for _, want := range []string{"<svg", ">PASS<", "kill d0", "e2", "1.60 s", "polyline", "d0 (…abcdef)", "url(#down)", ">TTL<", ">bound<", "UTC", "09:00:00"} {
		if !strings.Contains(h, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	// Self-contained: no external references besides the SVG namespace.
	ext := regexp.MustCompile(`(src|href)="(https?:)?//`)
	if ext.MatchString(h) {
		t.Error("report.html references external assets")
	}
}

func TestReportFailVerdictEscapes(t *testing.T) {
	s := sampleSuite(t, false)
	if err := s.WriteFiles(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if s.OK || s.Reports[0].OK {
		t.Fatal("suite with a finding is OK")
	}
	h := RenderHTML(s)
	if !strings.Contains(h, ">FAIL<") || strings.Contains(h, "x<1>") || !strings.Contains(h, "x&lt;1&gt;") {
		t.Fatal("fail verdict or escaping wrong")
	}
}

func TestFmtAxis(t *testing.T) {
	for _, c := range []struct {
		d, step time.Duration
		want    string
	}{
		{1250 * time.Millisecond, 250 * time.Millisecond, "1.25s"},
		{1500 * time.Millisecond, 500 * time.Millisecond, "1.5s"},
		{2 * time.Second, 500 * time.Millisecond, "2.0s"},
		{150 * time.Millisecond, 50 * time.Millisecond, "0.15s"},
		{90 * time.Second, 10 * time.Second, "1m30s"},
		{45 * time.Second, 5 * time.Second, "45s"},
		{75 * time.Minute, 15 * time.Minute, "1h15m"},
	} {
		if got := fmtAxis(c.d, c.step); got != c.want {
			t.Errorf("fmtAxis(%s, %s) = %q, want %q", c.d, c.step, got, c.want)
		}
	}
}

// TestReportLarge: a soak's report (1,000 rounds over an hour) renders an overview
// and zoomed timelines of the worst rounds, not one timeline of everything, and its
// growth series is thinned.
func TestReportLarge(t *testing.T) {
	r := Report{Scenario: SoakScenario, Params: Params{Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond, Election: 500 * time.Millisecond, Duration: time.Hour},
		Started: t0, Finished: t0.Add(time.Hour), Devices: []DeviceInfo{{Name: "d0", ID: "12D3KooWabcdef"}, {Name: "d1", ID: "12D3KooWxyz123"}}}
	kinds := []string{FaultKill, FaultPause, FaultRestart, FaultChurn}
	for i := range 1000 {
		at := t0.Add(time.Duration(i) * 3600 * time.Millisecond)
		rd := Round{N: i + 1, Kind: kinds[i%4], Device: "d0 (…abcdef)", Holder: i%3 != 0, At: at, Took: 2 * time.Second}
		if rd.Holder {
			rd.Failover, rd.FromEpoch, rd.ToEpoch = time.Duration(700+i%500)*time.Millisecond, uint64(i), uint64(i+1)
		}
		r.Rounds = append(r.Rounds, rd)
		dev := []string{"d0", "d1"}[i%2]
		r.Events = append(r.Events, Event{At: at, Device: dev, Kind: EventKill, Label: "kill " + dev}, Event{At: at.Add(time.Second), Device: dev, Kind: EventRestart, Label: "restart " + dev})
		r.Holds = append(r.Holds, Span{Device: dev, Epoch: uint64(i + 1), From: at.Add(time.Second), To: at.Add(3 * time.Second)})
	}
	for i := range 60000 {
		r.Growth = append(r.Growth, Point{At: t0.Add(time.Duration(i) * 60 * time.Millisecond), Seq: uint64(i), Epoch: uint64(i / 60)})
	}
	r.Events = append(r.Events, r.Events[0]) // unsorted tails are tolerated
	r.Finish()
	if r.Summary.Faults != 1000 || len(r.Summary.Worst) != worstListed || len(r.Summary.Kinds) != 4 {
		t.Fatalf("summary: faults %d, worst %d, kinds %d", r.Summary.Faults, len(r.Summary.Worst), len(r.Summary.Kinds))
	}
	if len(r.Growth) > 3*maxGrowth+2000 {
		t.Fatalf("growth kept %d points", len(r.Growth))
	}
	h := RenderHTML(&Suite{Command: "baton drill --duration 1h", Started: t0, Reports: []Report{r}})
	if !strings.Contains(h, "Overview") || strings.Count(h, "<h3>Round #") != zoomRounds || !strings.Contains(h, "Worst 10 of 1000 rounds") {
		t.Fatalf("large report lacks its overview, worst table or %d zooms", zoomRounds)
	}
	if len(h) > 2<<20 {
		t.Fatalf("report.html is %d bytes", len(h))
	}
}
