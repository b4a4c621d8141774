package testnet

import (
	"regexp"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// TestGapLabelsDoNotOverlap: six handovers tens of milliseconds apart (as
// release-handover does) put their gap labels in every row above the lanes; no two
// labels, and no label and the legend line, may overlap (bold text measured wide).
func TestGapLabelsDoNotOverlap(t *testing.T) {
	r := Report{Scenario: "release-handover", Params: Params{Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond},
		Started: t0, Finished: t0.Add(1745 * time.Millisecond),
		Devices: []DeviceInfo{{Name: "d0"}, {Name: "d1"}, {Name: "d2"}}}
	for i, ms := range [][2]int{{739, 800}, {826, 862}, {1036, 1095}, {1102, 1151}, {1290, 1327}, {1342, 1386}} {
		r.Check.Failovers = append(r.Check.Failovers, Failover{FromEpoch: uint64(i + 1), ToEpoch: uint64(i + 2),
			LastAt: t0.Add(time.Duration(ms[0]) * time.Millisecond), FirstAt: t0.Add(time.Duration(ms[1]) * time.Millisecond),
			Duration: time.Duration(ms[1]-ms[0]) * time.Millisecond, Fault: "release d0", SinceFault: 42 * time.Millisecond})
	}
	svg := timelineSVG(&r, r.Started, r.Finished)
	type box struct{ x0, x1, y0, y1 float64 }
	var boxes []box
	re := regexp.MustCompile(`<text x="([0-9.]+)" y="([0-9.]+)" fill="#b71c1c" font-weight="bold">([^<]*)`)
	for _, m := range re.FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		boxes = append(boxes, box{x, x + 7.2*float64(len([]rune(m[3]))), y - 10, y + 3})
	}
	if len(boxes) < 4 {
		t.Fatalf("only %d gap labels drawn:\n%s", len(boxes), svg)
	}
	legend := regexp.MustCompile(`<text x="[0-9.]+" y="([0-9.]+)" fill="#333">bars:`).FindStringSubmatch(svg)
	if legend == nil {
		t.Fatal("no legend")
	}
	ly, _ := strconv.ParseFloat(legend[1], 64)
	for i, a := range boxes {
		if a.y0 < ly+3 {
			t.Errorf("gap label %d (y %.0f..%.0f) overlaps the legend line (baseline %.0f)", i, a.y0, a.y1, ly)
		}
		for j, b := range boxes[:i] {
			if a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 {
				t.Errorf("gap labels %d and %d overlap: %+v %+v", j, i, b, a)
			}
		}
	}
}

// TestGrowthStartsAtFirstCommit: a chain growing at every sample is drawn from the
// sample that first saw it grow, not from the end of the busy stretch (the line read
// 0 until the first pause in the commits).
func TestGrowthStartsAtFirstCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seq uint64
		r := newRecorder(20*time.Millisecond, func() []sampled {
			return []sampled{{name: "d0", st: &node.State{Head: node.HeadState{Seq: seq, Epoch: 1}}}}
		})
		r.sample() // seq 0
		start := time.Now()
		for range 50 { // a commit every sample for a second
			time.Sleep(20 * time.Millisecond)
			seq++
			r.sample()
		}
		if len(r.growth) == 0 {
			t.Fatal("no growth")
		}
		first := r.growth[0]
		if d := first.At.Sub(start); d > growthEvery+20*time.Millisecond {
			t.Fatalf("first growth point at +%s (seq %d): the line reads 0 for the first %s of a busy chain; points %v", d, first.Seq, d, r.growth)
		}
		for i := 1; i < len(r.growth); i++ {
			if gap := r.growth[i].At.Sub(r.growth[i-1].At); gap > growthEvery+20*time.Millisecond {
				t.Fatalf("points %d and %d %s apart on a chain growing every 20 ms", i-1, i, gap)
			}
		}
		if last := r.growth[len(r.growth)-1]; last.Seq != seq {
			t.Fatalf("last point seq %d, want %d", last.Seq, seq)
		}
	})
}
