package testnet

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
)

// Finding kinds reported by Check.
const (
	FindingFork       = "fork"             // two commits with the same prev on one device
	FindingDivergence = "divergence"       // two devices hold different commits at one seq
	FindingInvalid    = "invalid_chain"    // the chain's format (chain.VerifyChainOf) refused a device's chain
	FindingLost       = "lost_intent"      // an acknowledged intent is not in the chain
	FindingDuplicate  = "duplicate_intent" // an intent id appears in more than one op
	// FindingEquivocation: the Raft logs hold two different commits the chain key
	// signed for one (seq, epoch): a device signed twice on one head.
	FindingEquivocation = "equivocation"
	// FindingRefused: in a fault-free drill, a commit the chain key signed (in a Raft
	// log) that is not in the applied chain: the apply refused it, so the holder
	// signed something it did not own.
	FindingRefused = "refused_signature"
	// FindingUnverified: a Commit entry in a Raft log that does not verify under the
	// chain key.
	FindingUnverified = "unverified_commit"
	// FindingRepo: on an atproto chain, a device's stored repository head (MST root,
	// commit, rev) is not the one its applied chain replays to.
	FindingRepo = "repo_mismatch"
)

// maxListed bounds the refused and equivocating commits a result lists (the counts
// are complete).
const maxListed = 100

// DeviceChain is one device's applied commits (full encodings), in the order the
// device reports them (seq 1, 2, ...).
type DeviceChain struct {
	Device  string   `json:"device"`
	Commits [][]byte `json:"-"`
	// Applied is the Raft index the device had applied before its chain was read:
	// every entry up to it is in Commits or was refused by the apply. Zero: unknown
	// (every signed commit is judged against the chain).
	Applied uint64 `json:"applied,omitempty"`
	// Repo, on an atproto chain, is the device's stored repository head (encoded,
	// atproto.EncodeHead) as of its last commit in Commits: it must be the one its
	// chain replays to (FindingRepo). Nil: not read.
	Repo []byte `json:"-"`
}

// Ack is one intent the load generator got acknowledged (202: in the Raft log).
type Ack struct {
	ID     string    `json:"id"`
	At     time.Time `json:"at"`
	Device string    `json:"device"`
	Index  uint64    `json:"index"`
}

// CheckInput is everything the checker reads.
type CheckInput struct {
	Chain   string        // the chain's did:key
	Devices []DeviceChain // every device's chain
	Acked   []Ack         // the load generator's acknowledgement record
	// Observed, optional: when each seq was first seen applied (the cluster's
	// observer, on the drill's clock). Failover durations use it when present and
	// fall back to the commits' own time field (the holder's possibly skewed clock).
	Observed map[uint64]time.Time
	// Signatures, optional: every signed commit the devices' Raft logs held.
	Signatures *Signatures
	// FaultFree makes any signed commit missing from the applied chain a finding.
	FaultFree bool
	// Rejections are the apply's refusals by reason (reported, not judged).
	Rejections map[string]uint64
	// Names maps peer IDs to device labels for the per-device counts.
	Names map[string]string
	// Strict: findings listed in KnownIssues fail too.
	Strict bool
}

// Finding is one problem the checker found.
type Finding struct {
	Kind   string `json:"kind"`
	Device string `json:"device,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	ID     string `json:"id,omitempty"`
	Detail string `json:"detail"`
	// Known names the open issue this finding is a known symptom of (see
	// KnownIssues); a known finding is reported but does not fail a drill.
	Known string `json:"known,omitempty"`
}

func (f Finding) String() string {
	s := f.Kind
	if f.Known != "" {
		s += " (known: " + f.Known + ")"
	}
	if f.Device != "" {
		s += " device=" + f.Device
	}
	if f.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", f.Seq)
	}
	if f.ID != "" {
		s += " id=" + f.ID
	}
	return s + ": " + f.Detail
}

// Failover is one change of signer along the chain: the last commit of the old
// holder (epoch FromEpoch) to the first commit of the new one (ToEpoch).
type Failover struct {
	FromEpoch uint64        `json:"from_epoch"`
	ToEpoch   uint64        `json:"to_epoch"`
	From      string        `json:"from"` // signer peer IDs
	To        string        `json:"to"`
	LastSeq   uint64        `json:"last_seq"`
	FirstSeq  uint64        `json:"first_seq"`
	LastAt    time.Time     `json:"last_at"`
	FirstAt   time.Time     `json:"first_at"`
	Duration  time.Duration `json:"duration_ns"`
	Source    string        `json:"source"` // "observed" or "commit_time"
	// Fault and SinceFault are filled in by a drill: the fault that preceded the
	// failover and the time from it to the new holder's first commit (the outage a
	// client saw; Duration can be shorter when the old holder's last proposals were
	// committed by the new Raft leader after the fault).
	Fault      string        `json:"fault,omitempty"`
	SinceFault time.Duration `json:"since_fault_ns,omitempty"`
}

// CheckResult is the checker's verdict.
type CheckResult struct {
	Findings  []Finding         `json:"findings"`
	Failovers []Failover        `json:"failovers"`
	Heads     map[string]uint64 `json:"heads"`   // device -> head seq
	Commits   int               `json:"commits"` // commits in the longest chain
	Intents   int               `json:"intents"` // ops in the longest chain
	Acked     int               `json:"acked"`   // acknowledged intents checked
	Forks     int               `json:"forks"`   // fork + divergence findings
	Lost      int               `json:"lost"`
	Dupes     int               `json:"duplicates"`
	Invalid   int               `json:"invalid"`
	// From the Raft logs (zero when they were not read): distinct signed commits,
	// (seq, epoch) pairs with more than one, signed commits not in the applied chain
	// (in total and by signer), Commit entries that do not verify.
	RaftRead      bool   `json:"raft_read"`
	RaftEntries   int    `json:"raft_commit_entries"`
	RaftUnread    uint64 `json:"raft_unread"`
	Signed        int    `json:"signed"`
	Equivocations int    `json:"equivocations"`
	Refused       int    `json:"refused"`
	// Late counts signed commits at Raft indexes no read chain covered: appended
	// after the chains were read (the signer went on while the drill collected), so
	// neither applied nor refused as far as the checker knows.
	Late        int               `json:"late,omitempty"`
	RefusedBy   map[string]int    `json:"refused_by,omitempty"`
	Unverified  int               `json:"unverified"`
	RefusedList []SignedCommit    `json:"refused_list,omitempty"` // up to maxListed
	Rejections  map[string]uint64 `json:"rejections,omitempty"`
	refusedAll  []SignedCommit    // every refused commit, for attribution to rounds
}

// OK reports whether the checker found no problem.
func (r CheckResult) OK() bool { return r.Unknown() == 0 }

// Unknown counts the findings that are not known symptoms of an open issue.
func (r CheckResult) Unknown() int {
	n := 0
	for _, f := range r.Findings {
		if f.Known == "" {
			n++
		}
	}
	return n
}

// KnownIssues are finding kinds that today's code is known to produce in drills with
// faults, by the issue that fixes them. Such findings are listed and counted, and do
// not fail the drill; fault-free drills and CheckInput.Strict ignore this list. Delete
// an entry once its fix lands.
var KnownIssues = map[string]string{}

// Check reads every device's chain and the acknowledgement record and reports forks
// (two commits with one prev on a device, on an atproto chain also two with one rev
// or one prevData (see linkKeys), or two devices disagreeing on a seq), chains their
// format's verification refuses (chain.VerifyChainOf: an atproto chain's replays its
// repository, so revs strictly increase, prevData links and MST roots are checked),
// acknowledged intents missing from the chain, intents appearing more than once, and each failover with its duration. The
// reference chain for intents and failovers is the longest one; a drill checks
// after the cluster has converged and drained, so every device should hold it.
func Check(in CheckInput) CheckResult {
	res := CheckResult{Heads: map[string]uint64{}}
	type entry struct {
		hash   [chain.HashSize]byte
		device string
	}
	bySeq := map[uint64]entry{}
	var longest []chain.Commit
	var longestHash map[uint64]string
	f := FormatOf(in.Chain)
	for _, d := range in.Devices {
		res.Heads[d.Device] = uint64(len(d.Commits))
		if err := verifyDevice(f, in.Chain, d); err != nil {
			var seq uint64
			if ve, ok := err.(*chain.VerifyError); ok {
				seq = ve.Seq
			}
			kind := FindingInvalid
			if errors.Is(err, errRepo) {
				kind = FindingRepo
			}
			res.Findings = append(res.Findings, Finding{Kind: kind, Device: d.Device, Seq: seq, Detail: err.Error()})
			res.Invalid++
		}
		prevs := map[string]uint64{} // prev hex -> seq of the first commit naming it
		links := newLinkKeys()       // the format's other links (atproto: rev, prevData)
		var decoded []chain.Commit
		hashes := map[uint64]string{}
		for _, raw := range d.Commits {
			c, err := signer.DecodeCommit(raw)
			if err != nil {
				// VerifyChainOf above reported it; skip undecodable commits here.
				continue
			}
			if c.Seq != 0 {
				res.Heads[d.Device] = c.Seq
			}
			decoded = append(decoded, c)
			pk := hex.EncodeToString(c.Prev)
			if first, dup := prevs[pk]; dup {
				res.Findings = append(res.Findings, Finding{Kind: FindingFork, Device: d.Device, Seq: c.Seq,
					Detail: fmt.Sprintf("seq %d and seq %d share prev %s", first, c.Seq, abbrevHex(pk))})
				res.Forks++
			} else {
				prevs[pk] = c.Seq
			}
			for _, dup := range links.add(f, c.Seq, raw) {
				res.Findings = append(res.Findings, Finding{Kind: FindingFork, Device: d.Device, Seq: c.Seq, Detail: dup})
				res.Forks++
			}
			h := f.Hash(raw)
			hashes[c.Seq] = hex.EncodeToString(h[:])
			if e, ok := bySeq[c.Seq]; ok {
				if e.hash != h && e.device != d.Device {
					res.Findings = append(res.Findings, Finding{Kind: FindingDivergence, Device: d.Device, Seq: c.Seq,
						Detail: fmt.Sprintf("%s has %s, %s has %s", e.device, abbrevHex(hex.EncodeToString(e.hash[:])),
							d.Device, abbrevHex(hex.EncodeToString(h[:])))})
					res.Forks++
				}
			} else {
				bySeq[c.Seq] = entry{hash: h, device: d.Device}
			}
		}
		if len(decoded) > len(longest) {
			longest, longestHash = decoded, hashes
		}
	}

	// Intents: each id once in the reference chain; each acknowledged id present.
	seen := map[string]uint64{}
	for _, c := range longest {
		for _, op := range c.Ops {
			res.Intents++
			if first, dup := seen[op.ID]; dup {
				res.Findings = append(res.Findings, Finding{Kind: FindingDuplicate, Seq: c.Seq, ID: op.ID,
					Detail: fmt.Sprintf("signed at seq %d and again at seq %d", first, c.Seq)})
				res.Dupes++
				continue
			}
			seen[op.ID] = c.Seq
		}
	}
	res.Commits = len(longest)
	acked := map[string]bool{}
	for _, a := range in.Acked {
		if acked[a.ID] {
			continue
		}
		acked[a.ID] = true
		res.Acked++
		if _, ok := seen[a.ID]; !ok {
			res.Findings = append(res.Findings, Finding{Kind: FindingLost, Device: a.Device, ID: a.ID,
				Detail: fmt.Sprintf("acknowledged at %s (raft index %d) but not in the chain (head seq %d)",
					a.At.UTC().Format("15:04:05.000"), a.Index, len(longest))})
			res.Lost++
		}
	}
	res.Failovers = failovers(longest, in.Observed)
	res.Rejections = in.Rejections
	if in.Signatures != nil {
		checkSignatures(&res, in, longestHash)
	}
	if !in.Strict && !in.FaultFree {
		for i := range res.Findings {
			res.Findings[i].Known = KnownIssues[res.Findings[i].Kind]
		}
	}
	sort.SliceStable(res.Findings, func(i, j int) bool { return res.Findings[i].Kind < res.Findings[j].Kind })
	return res
}

// checkSignatures judges every signed commit of the Raft logs against the applied
// chain: two for one (seq, epoch) is an equivocation; one that the chain does not
// hold was refused (a finding only in a fault-free drill).
func checkSignatures(res *CheckResult, in CheckInput, appliedHash map[uint64]string) {
	sg := in.Signatures
	res.RaftRead, res.RaftEntries, res.RaftUnread = true, sg.Entries, sg.Unread
	res.Unverified = len(sg.Unverified)
	res.Findings = append(res.Findings, sg.Unverified...)
	name := func(id string) string {
		if n, ok := in.Names[id]; ok {
			return n
		}
		return shortID(id)
	}
	covered, known := uint64(0), len(in.Devices) > 0
	for _, d := range in.Devices {
		if d.Applied == 0 {
			known = false
		}
		covered = max(covered, d.Applied)
	}
	type se struct{ seq, epoch uint64 }
	bySE := map[se][]SignedCommit{}
	for _, sc := range sg.Commits {
		res.Signed++
		k := se{sc.Seq, sc.Epoch}
		bySE[k] = append(bySE[k], sc)
		if appliedHash[sc.Seq] == sc.Hash {
			continue
		}
		if known && sc.Index > covered {
			res.Late++
			continue
		}
		res.Refused++
		if res.RefusedBy == nil {
			res.RefusedBy = map[string]int{}
		}
		res.RefusedBy[name(sc.Signer)]++
		res.refusedAll = append(res.refusedAll, sc)
		if len(res.RefusedList) < maxListed {
			res.RefusedList = append(res.RefusedList, sc)
		}
		if in.FaultFree && res.Refused <= maxListed {
			res.Findings = append(res.Findings, Finding{Kind: FindingRefused, Device: name(sc.Signer), Seq: sc.Seq,
				Detail: fmt.Sprintf("epoch %d, hash %s (raft index %d, in the logs of %s) was signed but is not in the applied chain",
					sc.Epoch, abbrevHex(sc.Hash), sc.Index, strings.Join(sc.Logs, ", "))})
		}
	}
	var keys []se
	for k, v := range bySE {
		if len(v) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].seq < keys[j].seq || keys[i].seq == keys[j].seq && keys[i].epoch < keys[j].epoch
	})
	for _, k := range keys {
		v := bySE[k]
		res.Equivocations++
		if res.Equivocations > maxListed {
			continue
		}
		var hs []string
		for _, sc := range v {
			mark := ""
			if appliedHash[sc.Seq] == sc.Hash {
				mark = " (applied)"
			}
			hs = append(hs, fmt.Sprintf("%s%s by %s at raft index %d", abbrevHex(sc.Hash), mark, name(sc.Signer), sc.Index))
		}
		res.Findings = append(res.Findings, Finding{Kind: FindingEquivocation, Device: name(v[0].Signer), Seq: k.seq,
			Detail: fmt.Sprintf("%d different commits signed for seq %d in epoch %d: %s", len(v), k.seq, k.epoch, strings.Join(hs, "; "))})
	}
}

// failovers walks the chain and reports every change of epoch.
func failovers(chain []chain.Commit, observed map[uint64]time.Time) []Failover {
	var out []Failover
	for i := 1; i < len(chain); i++ {
		a, b := chain[i-1], chain[i]
		if a.Epoch == b.Epoch {
			continue
		}
		f := Failover{FromEpoch: a.Epoch, ToEpoch: b.Epoch, From: a.Signer, To: b.Signer, LastSeq: a.Seq, FirstSeq: b.Seq}
		ta, oka := observed[a.Seq]
		tb, okb := observed[b.Seq]
		if oka && okb {
			f.LastAt, f.FirstAt, f.Source = ta, tb, "observed"
		} else {
			f.LastAt, f.FirstAt, f.Source = time.UnixMilli(a.Time), time.UnixMilli(b.Time), "commit_time"
		}
		f.Duration = f.FirstAt.Sub(f.LastAt)
		out = append(out, f)
	}
	return out
}

func abbrevHex(s string) string {
	if s == "" {
		return "null"
	}
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
