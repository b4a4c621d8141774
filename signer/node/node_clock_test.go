package node

import (
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
)

func TestClockStateSuspectsARecentClamp(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	v := intentlog.View{LogTime: 42, TimeClamped: 1}
	if c := clockState(v, election.Stats{}, now); c.Suspect || c.LogTime != 42 || c.LogTimeClamped != 1 {
		t.Fatalf("no clamp: %+v", c)
	}
	es := election.Stats{ClockAhead: 1, LastClockAhead: election.ClockAheadReport{At: now.Add(-time.Minute), By: 2 * time.Hour}}
	if c := clockState(v, es, now); !c.Suspect || c.AheadByMs != 7_200_000 {
		t.Fatalf("a clamp a minute ago: %+v", c)
	}
	if c := clockState(v, es, now.Add(2*time.Hour)); c.Suspect {
		t.Fatalf("a clamp two hours ago still suspect: %+v", c)
	}
}
