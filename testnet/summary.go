package testnet

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// worstListed is how many rounds a summary lists as the worst.
const worstListed = 10

// Summary condenses a drill for reading at any size: per fault kind the count and the
// failover times, the checker's totals, the worst rounds.
type Summary struct {
	Faults int         `json:"faults"`
	Kinds  []KindStats `json:"kinds"`
	Totals Totals      `json:"totals"`
	// Worst are the rounds that failed first, then the slowest failovers, at most
	// worstListed (all rounds are in Report.Rounds).
	Worst []Round `json:"worst"`
	// LastFailover is the most recent round with a takeover.
	LastFailover *Round `json:"last_failover,omitempty"`
}

// KindStats are one fault kind's rounds. Failover figures cover the rounds whose
// fault moved the lease; Over counts those beyond Bound.
type KindStats struct {
	Kind      string        `json:"kind"`
	Count     int           `json:"count"`
	Failovers int           `json:"failovers"`
	Median    time.Duration `json:"median_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	Bound     time.Duration `json:"bound_ns"`
	Over      int           `json:"over_bound"`
	Errors    int           `json:"errors"`
	// Refused counts the signed-but-refused commits appended during its rounds.
	Refused int `json:"refused"`
	// CatchUpMedian and CatchUpMax: the target's catch-up once back (see
	// Round.CatchUp), over the rounds that measured one.
	CatchUpMedian time.Duration `json:"catch_up_median_ns,omitempty"`
	CatchUpMax    time.Duration `json:"catch_up_max_ns,omitempty"`
}

// Totals are the checker's counts, summed over reports.
type Totals struct {
	Commits       int               `json:"commits"`
	Acked         int               `json:"acked"`
	Signed        int               `json:"signed"`
	Forks         int               `json:"forks"`
	Lost          int               `json:"lost"`
	Duplicates    int               `json:"duplicates"`
	Invalid       int               `json:"invalid"`
	Equivocations int               `json:"equivocations"`
	Refused       int               `json:"refused"`
	Unverified    int               `json:"unverified"`
	RaftUnread    uint64            `json:"raft_unread"`
	Rejections    map[string]uint64 `json:"rejections,omitempty"`
}

// bound is the design's failover promise for a fault kind: TTL + tick + one Raft
// election, 2×TTL + tick + election when a clock is skewed.
func bound(kind string, p Params) time.Duration {
	b := p.TTL + p.Tick + p.Election
	if kind == FaultSkew {
		b += p.TTL
	}
	return b
}

func summarise(r *Report) Summary {
	s := summariseRounds(r.Rounds, r.Params)
	s.Totals = totalsOf([]*Report{r})
	return s
}

func summariseRounds(rounds []Round, p Params) Summary {
	s := Summary{Faults: len(rounds)}
	byKind := map[string]*KindStats{}
	durs := map[string][]time.Duration{}
	catch := map[string][]time.Duration{}
	var order []string
	for i := range rounds {
		rd := rounds[i]
		ks := byKind[rd.Kind]
		if ks == nil {
			ks = &KindStats{Kind: rd.Kind, Bound: bound(rd.Kind, p)}
			byKind[rd.Kind] = ks
			order = append(order, rd.Kind)
		}
		ks.Count++
		ks.Refused += rd.Refused
		if rd.CatchUp > 0 {
			catch[rd.Kind] = append(catch[rd.Kind], rd.CatchUp)
		}
		if rd.Error != "" {
			ks.Errors++
		}
		if rd.Failover > 0 {
			ks.Failovers++
			durs[rd.Kind] = append(durs[rd.Kind], rd.Failover)
			if rd.Over {
				ks.Over++
			}
			last := rd
			s.LastFailover = &last
		}
	}
	sort.Strings(order)
	for _, k := range order {
		ks := byKind[k]
		if d := durs[k]; len(d) > 0 {
			slices.Sort(d)
			ks.Median, ks.P99, ks.Max = quantile(d, 0.5), quantile(d, 0.99), d[len(d)-1]
		}
		if c := catch[k]; len(c) > 0 {
			slices.Sort(c)
			ks.CatchUpMedian, ks.CatchUpMax = quantile(c, 0.5), c[len(c)-1]
		}
		s.Kinds = append(s.Kinds, *ks)
	}
	worst := append([]Round(nil), rounds...)
	sort.SliceStable(worst, func(i, j int) bool {
		a, b := worst[i], worst[j]
		if (a.Error != "") != (b.Error != "") {
			return a.Error != ""
		}
		if a.Failover != b.Failover {
			return a.Failover > b.Failover
		}
		return a.Took > b.Took
	})
	s.Worst = worst[:min(len(worst), worstListed)]
	return s
}

// quantile is the nearest-rank p-quantile of sorted d.
func quantile(d []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

func totalsOf(rs []*Report) Totals {
	var t Totals
	for _, r := range rs {
		c := r.Check
		t.Commits += c.Commits
		t.Acked += c.Acked
		t.Signed += c.Signed
		t.Forks += c.Forks
		t.Lost += c.Lost
		t.Duplicates += c.Dupes
		t.Invalid += c.Invalid
		t.Equivocations += c.Equivocations
		t.Refused += c.Refused
		t.Unverified += c.Unverified
		t.RaftUnread += c.RaftUnread
		for k, v := range c.Rejections {
			if t.Rejections == nil {
				t.Rejections = map[string]uint64{}
			}
			t.Rejections[k] += v
		}
	}
	return t
}

// suiteSummary merges the reports' rounds and totals.
func suiteSummary(s *Suite) Summary {
	var rounds []Round
	var p Params
	var rs []*Report
	for i := range s.Reports {
		r := &s.Reports[i]
		rs = append(rs, r)
		p = r.Params
		for _, rd := range r.Rounds {
			rd.Kind = r.Scenario + "/" + rd.Kind
			rounds = append(rounds, rd)
		}
	}
	sum := summariseRounds(rounds, p)
	// Bounds by the fault kind, not the scenario/kind label.
	for i := range sum.Kinds {
		k := sum.Kinds[i].Kind
		sum.Kinds[i].Bound = bound(k[strings.LastIndexByte(k, '/')+1:], p)
	}
	sum.Totals = totalsOf(rs)
	return sum
}

// writeKinds prints the per-kind table, the totals and the worst rounds.
func writeKinds(w io.Writer, s Summary, labelOf func(Round) string) {
	if len(s.Kinds) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nFAULT\tCOUNT\tFAILOVERS\tMEDIAN\tP99\tMAX\tOVER BOUND\tERRORS\tREFUSED\tCATCH-UP MEDIAN/MAX")
		for _, k := range s.Kinds {
			cu := "-"
			if k.CatchUpMax > 0 {
				cu = fmtDur(k.CatchUpMedian) + " / " + fmtDur(k.CatchUpMax)
			}
			if k.Failovers == 0 {
				fmt.Fprintf(tw, "%s\t%d\t0\t-\t-\t-\t-\t%d\t%d\t%s\n", k.Kind, k.Count, k.Errors, k.Refused, cu)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d (> %s)\t%d\t%d\t%s\n", k.Kind, k.Count, k.Failovers, fmtDur(k.Median),
				fmtDur(k.P99), fmtDur(k.Max), k.Over, fmtDur(k.Bound), k.Errors, k.Refused, cu)
		}
		tw.Flush()
	}
	t := s.Totals
	fmt.Fprintf(w, "checker: %d acked, %d commits, %d signed in the raft logs; forks %d, lost %d, duplicates %d, invalid %d, "+
		"equivocations %d, signed-but-refused %d, unverified %d", t.Acked, t.Commits, t.Signed, t.Forks, t.Lost, t.Duplicates,
		t.Invalid, t.Equivocations, t.Refused, t.Unverified)
	if t.RaftUnread > 0 {
		fmt.Fprintf(w, " (%d raft entries compacted before they were read)", t.RaftUnread)
	}
	fmt.Fprintln(w)
	if len(t.Rejections) > 0 {
		fmt.Fprintf(w, "apply rejections: %s\n", fmtRejections(t.Rejections))
	}
	if len(s.Worst) > 0 && s.Faults > len(s.Worst) {
		fmt.Fprintf(w, "worst %d of %d rounds:\n", len(s.Worst), s.Faults)
		for _, rd := range s.Worst {
			fmt.Fprintf(w, "  %s\n", labelOf(rd))
		}
	}
}

// roundText is one line about a round: when, what, what followed.
func roundText(rd Round) string {
	s := fmt.Sprintf("#%d %s %s %s", rd.N, rd.At.UTC().Format("15:04:05.000"), rd.Kind, rd.Device)
	if rd.Holder {
		s += " (holder)"
	}
	if rd.Failover > 0 {
		s += fmt.Sprintf(": e%d→e%d %s by %s", rd.FromEpoch, rd.ToEpoch, fmtDur(rd.Failover), rd.NewHolder)
		if rd.Over {
			s += " OVER BOUND"
		}
	}
	if rd.Refused > 0 {
		s += fmt.Sprintf(", %d signed-but-refused", rd.Refused)
	}
	if rd.Error != "" {
		s += ": ERROR " + rd.Error
	}
	return s
}
