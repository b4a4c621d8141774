package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/batonhq/baton/internal/knobs"
	"github.com/batonhq/baton/signer/node"
)

// Knobs re-introduce fixed bugs for one run, so that a test can show the simulator
// still finds them. They are internal/knobs.Intentlog's, passed to every device's
// node (node.Config.Knobs.Intentlog): every replica of a run gets the same knobs
// (they change the apply).
type Knobs struct {
	// EpochOnlyClaim: a claim's compare-and-set checks only the epoch, not the
	// record's revision (bug b: a renewal landing after the claimant's read barrier
	// no longer makes the claim lose).
	EpochOnlyClaim bool
	// DedupeCount > 0: the dedupe window is a count of IDs, not a retention period
	// (bug c: a retry after DedupeCount other IDs is applied a second time).
	DedupeCount int
	// UnsealedRaft: raft.db without the seals of its entries' index, term and type
	// and of Raft's term and vote (issue 20 item 1: a device with a flipped term
	// starts, wins an election and truncates committed entries elsewhere).
	UnsealedRaft bool
	// SkipValidation, ResignRefused, TrustRefusal: internal/knobs.Signer's (issue
	// 19: an invalid intent reaches a commit; a commit refused for its content is
	// signed again under the next epoch, the one-request wedge; a refusal at or below
	// the head is believed, the false divergence alarm).
	SkipValidation bool
	ResignRefused  bool
	TrustRefusal   bool
	// UnboundedRev: internal/knobs.Signer's (atproto runs: revs from the holder's
	// own clock, unbounded; format.go).
	UnboundedRev bool
	// OwnRevClock: internal/knobs.Signer's (atproto runs: revs from the holder's own
	// clock bounded by log time, not from the cluster's; format.go).
	OwnRevClock bool
	// MaxInFlight8: internal/knobs.Signer's MaxInFlight 8, the signer's pipeline depth
	// before issue 23 (8 commits in flight while the holder leads Raft). Not a bug: a
	// deeper pipeline, which library users can still configure (signer.LoopConfig),
	// whose resend and refusal paths a sweep should still cover.
	MaxInFlight8 bool
	// UnboundedLogTime: one entry moves log time to its timestamp however far ahead,
	// and holders stamp with their wall clocks however far they stepped (issue 19
	// item 2: a clock days fast makes the dedupe window forget acknowledged IDs, and
	// their retries apply twice).
	UnboundedLogTime bool
	// SharedStamp: log time steps measured from the last stamp whoever wrote it (the
	// version-3 rule): handovers back and forth between clocks apart move log time a
	// step each (issue 19.2; profile flapping finds acknowledged IDs applied twice).
	SharedStamp bool
	// NoFence: a device that lost its Raft log (repair, lost raft.db, a restored
	// older copy) votes and campaigns at once (issue 20 item 2). Rebootstrap: such a
	// device with an empty log bootstraps as configured, which a chain key with a
	// history refuses (item 3: every simulated device is a founder). Only the repair
	// profile's faults make them matter.
	NoFence     bool
	Rebootstrap bool
	// FenceFiltersOnly: internal/knobs.Node's: the fence only filters Raft's messages
	// (issue 38 item 1, put back): a fenced device still campaigns, claims and signs,
	// and a restored copy whose configuration names it alone elects itself with no
	// message sent. Profile timetravel's restores of the founder's pre-join backup
	// find it (faults_timetravel.go).
	FenceFiltersOnly bool
	// NoPeerMemory: internal/knobs.Node's: a starting device does not ask the
	// members what they remember of it (issue 38 item 2, put back): a whole-disk
	// restore (the mark rolled back too) is not recognised (profile timetravel-whole).
	NoPeerMemory bool
	// BarrierNudges: internal/knobs.Intentlog's: the leader nudges followers with a
	// barrier entry, never a commit notice (intentlog/notice.go). Not a bug: the path
	// a transport without notices takes, which a sweep should still cover.
	BarrierNudges bool
	// NoSendAhead: internal/knobs.Intentlog's: the leader writes a batch to its log
	// before its followers get it (hashicorp/raft's order), instead of sending it
	// ahead while it writes (intentlog/ahead.go). Not a bug either.
	NoSendAhead bool
	// EarlyUnacked: internal/knobs.Intentlog's: Raft's replication counts a follower
	// as soon as an AppendEntries is pipelined to it, acknowledged or not (bug f: a
	// leader commits on its own write; a crash or a partition then loses
	// acknowledged intents).
	EarlyUnacked bool
}

// KnobsWired reports whether applyKnobs passes knobs to the code under test (it
// does: node.Config.Knobs.Intentlog).
const KnobsWired = true

// applyKnobs sets k on one device's node configuration (cfg.Knobs, which carries the
// simulator's BeforePropose hook, is kept).
func applyKnobs(k Knobs, cfg *node.Config) {
	if k == (Knobs{}) {
		return
	}
	if cfg.Knobs == nil {
		cfg.Knobs = &knobs.Node{}
	}
	cfg.Knobs.Intentlog = &knobs.Intentlog{EpochOnlyClaim: k.EpochOnlyClaim, DedupeCount: k.DedupeCount, UnsealedRaftLog: k.UnsealedRaft,
		UnboundedLogTime: k.UnboundedLogTime, SharedStamp: k.SharedStamp, BarrierNudges: k.BarrierNudges,
		NoSendAhead: k.NoSendAhead, EarlyUnacked: k.EarlyUnacked}
	if k.UnboundedLogTime {
		cfg.Knobs.Election = &knobs.Election{UnclampedStamps: true}
	}
	applySignerKnobs(k, cfg) // knobs_signer.go
	cfg.Knobs.NoFence, cfg.Knobs.Rebootstrap, cfg.Knobs.FenceFiltersOnly = k.NoFence, k.Rebootstrap, k.FenceFiltersOnly
	cfg.Knobs.NoPeerMemory = k.NoPeerMemory
}

// boolKnobs is every on/off knob, in the order String writes them: its name in a
// knob list, whether it puts a fixed bug back (the others bring back an older
// mechanism: what says which) and its field. The parser, String, the --knobs help
// and the unknown-knob error all read this one table (dedupe-count=N, the one knob
// with a value, is written after epoch-only-claim).
var boolKnobs = []struct {
	name  string
	bug   bool
	what  string
	field func(*Knobs) *bool
}{
	{"epoch-only-claim", true, "", func(k *Knobs) *bool { return &k.EpochOnlyClaim }},
	{"unsealed-raft", true, "", func(k *Knobs) *bool { return &k.UnsealedRaft }},
	{"unbounded-log-time", true, "", func(k *Knobs) *bool { return &k.UnboundedLogTime }},
	{"shared-stamp", true, "", func(k *Knobs) *bool { return &k.SharedStamp }},
	{"no-fence", true, "", func(k *Knobs) *bool { return &k.NoFence }},
	{"rebootstrap", true, "", func(k *Knobs) *bool { return &k.Rebootstrap }},
	{"fence-filters-only", true, "", func(k *Knobs) *bool { return &k.FenceFiltersOnly }},
	{"no-peer-memory", true, "", func(k *Knobs) *bool { return &k.NoPeerMemory }},
	{"barrier-nudges", false, "barriers instead of commit notices", func(k *Knobs) *bool { return &k.BarrierNudges }},
	{"no-send-ahead", false, "the leader writes a batch before its followers get it", func(k *Knobs) *bool { return &k.NoSendAhead }},
	{"early-unacked", true, "", func(k *Knobs) *bool { return &k.EarlyUnacked }},
	// The signer loop's (issue 19; applySignerKnobs).
	{"skip-validation", true, "", func(k *Knobs) *bool { return &k.SkipValidation }},
	{"resign-refused", true, "", func(k *Knobs) *bool { return &k.ResignRefused }},
	{"trust-refusal", true, "", func(k *Knobs) *bool { return &k.TrustRefusal }},
	{"unbounded-rev", true, "", func(k *Knobs) *bool { return &k.UnboundedRev }},
	{"own-rev-clock", true, "", func(k *Knobs) *bool { return &k.OwnRevClock }},
	{"max-in-flight-8", false, "the deeper pipeline of older versions: 8 commits in flight", func(k *Knobs) *bool { return &k.MaxInFlight8 }},
}

// knobNames lists the knobs for the help and the unknown-knob error: the bugs (with
// dedupe-count=N), then the older mechanisms, each with what it brings back.
func knobNames() string {
	bugs := []string{"dedupe-count=N"}
	var older []string
	for _, b := range boolKnobs {
		if b.bug {
			bugs = append(bugs, b.name)
		} else {
			older = append(older, b.name+" ("+b.what+")")
		}
	}
	return "knobs that put fixed bugs back: " + strings.Join(bugs, ", ") + "; and, not bugs: " + strings.Join(older, ", ")
}

// String is the form ParseKnobs reads: "epoch-only-claim,dedupe-count=64" ("" for
// none).
func (k Knobs) String() string {
	var parts []string
	for i, b := range boolKnobs {
		if *b.field(&k) {
			parts = append(parts, b.name)
		}
		if i == 0 && k.DedupeCount > 0 {
			parts = append(parts, fmt.Sprintf("dedupe-count=%d", k.DedupeCount))
		}
	}
	return strings.Join(parts, ",")
}

// ParseKnobs reads a comma-separated knob list (see Knobs.String).
func ParseKnobs(s string) (Knobs, error) {
	var k Knobs
next:
	for _, p := range strings.Split(s, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch name {
		case "":
			continue
		case "dedupe-count":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return Knobs{}, fmt.Errorf("sim: knob dedupe-count needs a positive count, got %q", val)
			}
			k.DedupeCount = n
			continue
		}
		for _, b := range boolKnobs {
			if b.name == name {
				*b.field(&k) = true
				continue next
			}
		}
		return Knobs{}, fmt.Errorf("sim: unknown knob %q (%s)", name, knobNames())
	}
	return k, nil
}
