package sim

import (
	"reflect"
	"testing"
	"time"
)

// TestScheduleIsTheSeeds: a schedule is a function of the seed (and the run's
// shape), a shorter run's faults are a prefix of a longer one's, and seeds differ.
func TestScheduleIsTheSeeds(t *testing.T) {
	p, _ := LookupProfile("mixed")
	faults := func(acts []action, before time.Duration) []action {
		var out []action
		for _, a := range acts {
			if a.Kind != aHeal && a.Kind != aFlush && a.At < before {
				out = append(out, a)
			}
		}
		return out
	}
	for seed := int64(1); seed <= 20; seed++ {
		a := makeSchedule(seed, 4, p, 20*time.Second, time.Second)
		if b := makeSchedule(seed, 4, p, 20*time.Second, time.Second); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two schedules differ", seed)
		}
		short := makeSchedule(seed, 4, p, 8*time.Second, time.Second)
		if fa, fs := faults(a, 8*time.Second), faults(short, 8*time.Second); !reflect.DeepEqual(fa, fs) {
			t.Fatalf("seed %d: the 8 s schedule's faults are not the first 8 s of the 20 s one's:\n%v\n%v", seed, fs, fa)
		}
		if len(faults(a, 20*time.Second)) == 0 {
			t.Errorf("seed %d: no fault in 20 s of the mixed profile", seed)
		}
	}
	if reflect.DeepEqual(makeSchedule(1, 4, p, 10*time.Second, time.Second), makeSchedule(2, 4, p, 10*time.Second, time.Second)) {
		t.Error("seeds 1 and 2 drew the same schedule")
	}
}
