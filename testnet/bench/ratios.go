package bench

import (
	"cmp"
	"fmt"
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
			out = append(out, Ratio{Name: "signed/s at 64 clients (" + b.API + ") / applied/s", Value: v, Target: fmt.Sprintf(">= %.1f", tput), Met: v >= tput})
		}
		if b.Clients == 1 {
			v := ratio(b.Signed.P50Ms, bl.Apply.P50Ms)
			out = append(out, Ratio{Name: "signed p50, 1 client (" + b.API + ") / apply p50", Value: v, Target: fmt.Sprintf("<= %.1f", lat), Met: v > 0 && v <= lat})
			v = ratio(b.Accepted.P50Ms, bl.Apply.P50Ms)
			out = append(out, Ratio{Name: "accepted p50, 1 client (" + b.API + ") / apply p50", Value: v, Target: fmt.Sprintf("<= %.1f", lat), Met: v > 0 && v <= lat})
		}
	}
	if fo := r.Failover; fo != nil && ttl > 0 {
		if fo.Crash.N > 0 {
			out = append(out, Ratio{Name: "crash failover median / TTL", Value: fo.CrashTTLx, Target: "<= 0.8", Met: fo.CrashTTLx <= 0.8})
		}
		if fo.CrashLeader.N > 0 {
			out = append(out, Ratio{Name: "crash failover (holder was leader) median / TTL", Value: fo.LeaderTTLx, Target: "<= 1.1", Met: fo.LeaderTTLx <= 1.1})
		}
		if fo.Crash.N > 0 {
			out = append(out, Ratio{Name: "crash failover p99 / TTL", Value: fo.CrashP99x, Target: "<= 1.0", Met: fo.CrashP99x <= 1.0})
		}
		if fo.CrashLeader.N > 0 {
			out = append(out, Ratio{Name: "crash failover (holder was leader) p99 / TTL", Value: fo.LeaderP99x, Target: "<= 1.0", Met: fo.LeaderP99x <= 1.0})
		}
		if fo.Crash.N+fo.CrashLeader.N > 0 {
			out = append(out, Ratio{Name: "crash rounds over TTL+tick+election", Value: float64(fo.OverBound), Target: "0", Met: fo.OverBound == 0})
		}
		if fo.Graceful.N > 0 {
			out = append(out, Ratio{Name: "graceful handover median (ms)", Value: fo.Graceful.P50Ms, Target: "<= 10", Met: fo.Graceful.P50Ms <= 10})
		}
	}
	if a := r.AtRest; a != nil {
		out = append(out, Ratio{Name: "Raft entries per TTL at rest", Value: a.LeaseEntriesPerTTL, Target: "<= 2", Met: a.LeaseEntriesPerTTL <= 2})
		grow := float64(a.DiskAfterWindow - a.DiskAfter)
		out = append(out, Ratio{Name: "disk growth after snapshot (bytes)", Value: grow, Target: "<= 0", Met: grow <= 0})
	}
	if a := cmp.Or(r.AtRestProcs, r.AtRest); a != nil {
		if a == r.AtRestProcs {
			out = append(out, Ratio{Name: "Raft entries per TTL at rest (processes)", Value: a.LeaseEntriesPerTTL, Target: "<= 2", Met: a.LeaseEntriesPerTTL <= 2})
		}
		for _, u := range a.Devices {
			out = append(out, Ratio{Name: "RSS MiB, " + u.Name, Value: u.RSSMiB, Target: "<= 64", Met: u.RSSMiB <= 64})
			out = append(out, Ratio{Name: "CPU % of a core, " + u.Name, Value: u.CPUPct, Target: "<= 1", Met: u.CPUPct <= 1})
		}
	}
	return out
}
