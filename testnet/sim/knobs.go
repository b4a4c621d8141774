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

// String is the form ParseKnobs reads: "epoch-only-claim,dedupe-count=64" ("" for
// none).
func (k Knobs) String() string {
	var parts []string
	if k.EpochOnlyClaim {
		parts = append(parts, "epoch-only-claim")
	}
	if k.DedupeCount > 0 {
		parts = append(parts, fmt.Sprintf("dedupe-count=%d", k.DedupeCount))
	}
	if k.UnsealedRaft {
		parts = append(parts, "unsealed-raft")
	}
	if k.UnboundedLogTime {
		parts = append(parts, "unbounded-log-time")
	}
	if k.SharedStamp {
		parts = append(parts, "shared-stamp")
	}
	if k.NoFence {
		parts = append(parts, "no-fence")
	}
	if k.Rebootstrap {
		parts = append(parts, "rebootstrap")
	}
	if k.FenceFiltersOnly {
		parts = append(parts, "fence-filters-only")
	}
	if k.NoPeerMemory {
		parts = append(parts, "no-peer-memory")
	}
	if k.BarrierNudges {
		parts = append(parts, "barrier-nudges")
	}
	if k.NoSendAhead {
		parts = append(parts, "no-send-ahead")
	}
	if k.EarlyUnacked {
		parts = append(parts, "early-unacked")
	}
	parts = append(parts, k.signerKnobNames()...)
	return strings.Join(parts, ",")
}

// ParseKnobs reads a comma-separated knob list (see Knobs.String).
func ParseKnobs(s string) (Knobs, error) {
	var k Knobs
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		name, val, _ := strings.Cut(p, "=")
		switch name {
		case "":
		case "epoch-only-claim":
			k.EpochOnlyClaim = true
		case "unsealed-raft":
			k.UnsealedRaft = true
		case "unbounded-log-time":
			k.UnboundedLogTime = true
		case "shared-stamp":
			k.SharedStamp = true
		case "no-fence":
			k.NoFence = true
		case "rebootstrap":
			k.Rebootstrap = true
		case "fence-filters-only":
			k.FenceFiltersOnly = true
		case "no-peer-memory":
			k.NoPeerMemory = true
		case "barrier-nudges":
			k.BarrierNudges = true
		case "no-send-ahead":
			k.NoSendAhead = true
		case "early-unacked":
			k.EarlyUnacked = true
		case "dedupe-count":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return Knobs{}, fmt.Errorf("sim: knob dedupe-count needs a positive count, got %q", val)
			}
			k.DedupeCount = n
		default:
			if k.setSignerKnob(name) {
				continue
			}
			return Knobs{}, fmt.Errorf("sim: unknown knob %q (have epoch-only-claim, dedupe-count=N, unsealed-raft, unbounded-log-time, no-fence, rebootstrap, fence-filters-only, no-peer-memory, barrier-nudges, no-send-ahead, early-unacked, %s)", name, strings.Join(signerKnobList, ", "))
		}
	}
	return k, nil
}
