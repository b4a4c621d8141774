package bench

import (
	"cmp"
	"strconv"
	"strings"
)

// ratios divides baton's figures by the baseline's and compares them with the
// targets of issue 23 (throughput, latency, failover p99, graceful handover; issue 7's
// for the crash medians and the rest).
func ratios(r *Report) []Ratio {
	var out []Ratio
	base := map[int]BaselineLoad{}
	for _, b := range r.Baseline {
		base[b.Clients] = b
	}
	ttl := r.Settings.TTLMs
	for _, b := range append(append([]BatonLoad(nil), r.Baton...), r.BatonProcs...) {
		bl, ok := base[b.Clients]
		if !ok {
			continue
		}
		// The Go API's targets, then the socket's (an HTTP request per submission).
		tput, lat := 1.0, 1.3
		if strings.HasPrefix(b.API, "socket") {
			tput, lat = 0.8, 1.5
		}
		if b.Clients == 64 {
			v := ratio(b.SignedPerSec, bl.AppliedPerSec)
			out = append(out, atLeast("signed/s at 64 clients ("+b.API+") / applied/s", v, tput))
		}
		if b.Clients == 1 {
			v := ratio(b.Signed.P50Ms, bl.Apply.P50Ms)
			out = append(out, latencyAtMost("signed p50, 1 client ("+b.API+") / apply p50", v, lat))
			v = ratio(b.Accepted.P50Ms, bl.Apply.P50Ms)
			out = append(out, latencyAtMost("accepted p50, 1 client ("+b.API+") / apply p50", v, lat))
		}
	}
	if fo := r.Failover; fo != nil && ttl > 0 {
		if fo.Crash.N > 0 {
			out = append(out, atMost("crash failover median / TTL", fo.CrashTTLx, 0.8))
		}
		if fo.CrashLeader.N > 0 {
			out = append(out, atMost("crash failover (holder was leader) median / TTL", fo.LeaderTTLx, 1.1))
		}
		if fo.Crash.N > 0 {
			out = append(out, atMost("crash failover p99 / TTL", fo.CrashP99x, 1.0))
		}
		if fo.CrashLeader.N > 0 {
			out = append(out, atMost("crash failover (holder was leader) p99 / TTL", fo.LeaderP99x, 1.0))
		}
		if fo.Crash.N+fo.CrashLeader.N > 0 {
			out = append(out, atMost("crash rounds over TTL+tick+election", float64(fo.OverBound), 0))
		}
		if fo.Graceful.N > 0 {
			out = append(out, atMost("graceful handover median (ms)", fo.Graceful.P50Ms, 10))
		}
	}
	if a := r.AtRest; a != nil {
		out = append(out, atMost("Raft entries per TTL at rest", a.LeaseEntriesPerTTL, 2))
		grow := float64(a.DiskAfterWindow - a.DiskAfter)
		out = append(out, atMost("disk growth after snapshot (bytes)", grow, 0))
	}
	if a := cmp.Or(r.AtRestProcs, r.AtRest); a != nil {
		if a == r.AtRestProcs {
			out = append(out, atMost("Raft entries per TTL at rest (processes)", a.LeaseEntriesPerTTL, 2))
		}
		for _, u := range a.Devices {
			out = append(out, atMost("RSS MiB, "+u.Name, u.RSSMiB, 64))
			out = append(out, atMost("CPU % of a core, "+u.Name, u.CPUPct, 1))
		}
	}
	return out
}

// atMost is a row whose target is value <= bound; atLeast, value >= bound.
func atMost(name string, v, bound float64) Ratio {
	return Ratio{Name: name, Value: v, Target: "<= " + boundText(bound), Met: v <= bound, bound: bound}
}

func atLeast(name string, v, bound float64) Ratio {
	return Ratio{Name: name, Value: v, Target: ">= " + boundText(bound), Met: v >= bound, bound: bound}
}

// latencyAtMost is atMost for a latency ratio, where 0 means no figure (not met).
func latencyAtMost(name string, v, bound float64) Ratio {
	r := atMost(name, v, bound)
	r.Met = r.Met && v > 0
	return r
}

// boundText writes a bound as the table always has: one decimal below 10 (1.0, 0.8),
// whole numbers from there (10, 64).
func boundText(b float64) string {
	if b < 10 && b != 0 {
		return strconv.FormatFloat(b, 'f', 1, 64)
	}
	return strconv.FormatFloat(b, 'f', -1, 64)
}
