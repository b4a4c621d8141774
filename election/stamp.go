package election

import (
	"time"

	"github.com/batonhq/baton/intentlog"
)

// MaxStampLead is how far this device's wall clock may run ahead of its monotonic
// clock, since its last accepted write of the current hold, before its stamps are
// clamped (stampLocked). NTP slews a clock by at most 500 ppm, a few milliseconds over
// a TTL: a larger lead is a step of the wall clock.
const MaxStampLead = time.Second

// ClockAheadReport is the last time this device clamped a stamp of its hold because its
// wall clock had stepped ahead.
type ClockAheadReport struct {
	At    time.Time     // this device's (ahead) wall clock when it was clamped
	Epoch uint64        // the hold
	By    time.Duration // how far the wall clock was ahead of the clamped stamp
}

// stampLocked is the timestamp this device writes (a renewal, a transfer, a commit's
// time) at the wall reading now: now, unless the wall clock has run ahead of the
// monotonic clock by more than MaxStampLead since this device's last accepted write of
// the record's epoch; then that write's ts plus the monotonic time since it. A clock
// that steps ahead during a hold therefore does not move the record's ts or log time
// ahead: the hold goes on at its own clock's pace. Claims are not clamped (a new hold
// has no write of its own to measure from; the apply bounds the step, see intentlog's
// applier.advance). A clock that steps back is not clamped either: ts = max(..., rec.TS+1)
// and the apply's log time do not go back.
func (l *Lease) stampLocked(now time.Time, mono time.Duration) int64 {
	ts := now.UnixMilli()
	rec := l.cur
	if rec.Holder != l.self || l.unclamped() {
		return ts
	}
	var last *write
	for i := range l.writes {
		w := &l.writes[i]
		if w.ok && w.epoch == rec.Epoch && (last == nil || w.mono > last.mono) {
			last = w
		}
	}
	if last == nil {
		return ts
	}
	limit := last.ts + (mono - last.mono).Milliseconds()
	if ts > limit+MaxStampLead.Milliseconds() {
		l.stats.ClockAhead++
		l.stats.LastClockAhead = ClockAheadReport{At: now, Epoch: rec.Epoch, By: time.Duration(ts-limit) * time.Millisecond}
		return limit
	}
	return ts
}

// claimStampLocked is the timestamp of a claim of rec at the wall reading now. A
// re-claim of this device's own record is stamped like a renewal (stampLocked). A claim
// of a record this device saw replace an earlier one is stamped at most the record's ts
// plus the monotonic time since this device first saw it, plus one TTL (the time the
// record took to reach it, and a release that kept the last renewal's ts): a wall clock
// further ahead of the record than that is this device's error or the record writer's,
// and either way the claim follows the record's pace rather than move the record's ts
// and log time ahead by the difference. Without that observation (this device started
// after the record was written) the claim carries the wall clock, and the apply bounds
// the step it moves log time by.
func (l *Lease) claimStampLocked(rec intentlog.Lease, now time.Time, mono time.Duration) int64 {
	if rec.Holder == l.self {
		return l.stampLocked(now, mono)
	}
	ts := now.UnixMilli()
	if !l.seen || !l.havePrev || rec != l.cur || l.unclamped() {
		return ts
	}
	limit := rec.TS + (mono - l.firstSeen).Milliseconds() + RecordTTL(rec, l.pol.TTL).Milliseconds()
	if ts > limit {
		l.stats.ClockAhead++
		l.stats.LastClockAhead = ClockAheadReport{At: now, Epoch: rec.Epoch + 1, By: time.Duration(ts-limit) * time.Millisecond}
		return limit
	}
	return ts
}

// Stamp is the timestamp the holder puts on a commit it signs now: the wall clock, or,
// if the wall clock stepped ahead during the hold, the hold's own pace (see
// stampLocked). The signer uses it for a commit's time, which moves log time.
func (l *Lease) Stamp() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stampLocked(l.clock.Now(), l.clock.Mono())
}

func (l *Lease) unclamped() bool { return l.knobs != nil && l.knobs.UnclampedStamps }
