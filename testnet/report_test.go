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
	for _, want := range []string{"<svg", ">PASS<", "kill d0", "e2", "1.60 s", "polyline"} {
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
