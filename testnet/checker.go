package testnet

import (
	"encoding/hex"
	"fmt"
	"sort"
	"time"

	"github.com/batonhq/baton/signer/chain"
)

// Finding kinds reported by Check.
const (
	FindingFork       = "fork"             // two commits with the same prev on one device
	FindingDivergence = "divergence"       // two devices hold different commits at one seq
	FindingInvalid    = "invalid_chain"    // chain.VerifyChain refused a device's chain
	FindingLost       = "lost_intent"      // an acknowledged intent is not in the chain
	FindingDuplicate  = "duplicate_intent" // an intent id appears in more than one op
)

// DeviceChain is one device's applied commits (full encodings), in the order the
// device reports them (seq 1, 2, ...).
type DeviceChain struct {
	Device  string   `json:"device"`
	Commits [][]byte `json:"-"`
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
}

// Finding is one problem the checker found.
type Finding struct {
	Kind   string `json:"kind"`
	Device string `json:"device,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	ID     string `json:"id,omitempty"`
	Detail string `json:"detail"`
}

func (f Finding) String() string {
	s := f.Kind
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
}

// OK reports whether the checker found no problem.
func (r CheckResult) OK() bool { return len(r.Findings) == 0 }

// Check reads every device's chain and the acknowledgement record and reports forks
// (two commits with one prev on a device, or two devices disagreeing on a seq),
// chains chain.VerifyChain refuses, acknowledged intents missing from the chain,
// intents appearing more than once, and each failover with its duration. The
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
	for _, d := range in.Devices {
		res.Heads[d.Device] = uint64(len(d.Commits))
		if err := chain.VerifyChain(d.Commits, in.Chain); err != nil {
			var seq uint64
			if ve, ok := err.(*chain.VerifyError); ok {
				seq = ve.Seq
			}
			res.Findings = append(res.Findings, Finding{Kind: FindingInvalid, Device: d.Device, Seq: seq, Detail: err.Error()})
			res.Invalid++
		}
		prevs := map[string]uint64{} // prev hex -> seq of the first commit naming it
		var decoded []chain.Commit
		for _, raw := range d.Commits {
			c, err := chain.Decode(raw)
			if err != nil {
				// VerifyChain above reported it; skip undecodable commits here.
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
			h := chain.Hash(raw)
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
			longest = decoded
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
	sort.SliceStable(res.Findings, func(i, j int) bool { return res.Findings[i].Kind < res.Findings[j].Kind })
	return res
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
