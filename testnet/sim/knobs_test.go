package sim

import (
	"strings"
	"testing"
)

// Every knob of the table reads back from its name (String, then ParseKnobs), and the
// help and the unknown-knob error name every one of them: one table, no second list
// to drift (the help had lost early-unacked, the error shared-stamp).
func TestKnobsOneTable(t *testing.T) {
	all := Knobs{DedupeCount: 64}
	for _, b := range boolKnobs {
		var k Knobs
		*b.field(&k) = true
		got, err := ParseKnobs(k.String())
		if err != nil || got != k || k.String() != b.name {
			t.Errorf("%s: String %q, read back %+v (%v)", b.name, k.String(), got, err)
		}
		*b.field(&all) = true
	}
	if got, err := ParseKnobs(all.String()); err != nil || got != all {
		t.Errorf("every knob: %q read back %+v (%v)", all.String(), got, err)
	}
	_, err := ParseKnobs("no-such-knob")
	for _, b := range boolKnobs {
		if err == nil || !strings.Contains(err.Error(), b.name) || !strings.Contains(knobNames(), b.name) {
			t.Errorf("the unknown-knob error or the help lacks %s: %v", b.name, err)
		}
	}
	if _, err := ParseKnobs("dedupe-count=0"); err == nil {
		t.Error("dedupe-count=0 accepted")
	}
}
