package node

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/batonhq/baton/intentlog"
)

// maxTracked bounds the submissions whose intent-to-signed latency is being timed;
// beyond it new ones are not timed (the histogram samples, it does not account).
const maxTracked = 1 << 16

// metrics is a node's Prometheus registry (one per node: several nodes may run in one
// process). Gauges and counters are read from the node's own counters at scrape time;
// the latency histogram is fed from applied commits.
type metrics struct {
	n       *Node
	reg     *prometheus.Registry
	latency prometheus.Histogram

	mu      sync.Mutex
	tracked map[string]time.Time
}

var (
	descRole        = prometheus.NewDesc("baton_raft_state", "Raft role of this device (1 for the current role).", []string{"role"}, nil)
	descTerm        = prometheus.NewDesc("baton_raft_term", "Current Raft term.", nil, nil)
	descCommitIdx   = prometheus.NewDesc("baton_raft_commit_index", "Raft commit index.", nil, nil)
	descAppliedIdx  = prometheus.NewDesc("baton_raft_applied_index", "Index applied to the local state.", nil, nil)
	descLastContact = prometheus.NewDesc("baton_raft_last_contact_seconds", "Seconds since the leader was last heard from (0 on the leader).", nil, nil)
	descEpoch       = prometheus.NewDesc("baton_lease_epoch", "Epoch of the lease record.", nil, nil)
	descHeld        = prometheus.NewDesc("baton_lease_held", "1 while this device holds the lease and may sign.", nil, nil)
	descLeaseWrites = prometheus.NewDesc("baton_lease_writes_total", "Accepted lease writes by this device, by kind.", []string{"kind"}, nil)
	descLeaseRej    = prometheus.NewDesc("baton_lease_rejections_total", "Rejected lease writes by this device, by reason.", []string{"reason"}, nil)
	descLeaseErrs   = prometheus.NewDesc("baton_lease_propose_errors_total", "Lease proposals with an unknown outcome.", nil, nil)
	descSkew        = prometheus.NewDesc("baton_lease_skew_suspicions_total", "Lease records on which the wall clocks disagreed with observation.", nil, nil)
	descHeadSeq     = prometheus.NewDesc("baton_chain_head_seq", "Seq of the applied chain head.", nil, nil)
	descCommits     = prometheus.NewDesc("baton_commits_signed_total", "Commits this device signed that were applied.", nil, nil)
	descCommitsRej  = prometheus.NewDesc("baton_commits_rejected_total", "Commits this device signed that the apply refused, by reason.", []string{"reason"}, nil)
	descRefused     = prometheus.NewDesc("baton_commits_signed_refused_total", "Commits this device signed that will never apply (refused, or voided when the epoch moved on with them in flight); 0 in fault-free operation.", nil, nil)
	descContentRef  = prometheus.NewDesc("baton_commits_refused_total", "Commits this device signed that the apply refused for their content (not the fence nor a race on the head), by reason: a defect, 0 in any operation.", []string{"reason"}, nil)
	descBumps       = prometheus.NewDesc("baton_lease_bumps_total", "Moves of this device's hold to the next epoch after a refused commit.", nil, nil)
	descRejections  = prometheus.NewDesc("baton_apply_rejections_total", "Entries the local apply rejected, by reason.", []string{"reason"}, nil)
	descPending     = prometheus.NewDesc("baton_pending_intents", "Intents accepted and not yet signed.", nil, nil)
	descMembers     = prometheus.NewDesc("baton_members", "Raft members.", nil, nil)
	descProblem     = prometheus.NewDesc("baton_problem", "1 for the kind of problem that keeps this device from signing (catching_up: restored or repaired and not caught up; diverged: its history or state differs from the others', the alarm; storage; identity; clone: another process runs with this identity and this one must stop; other); absent while healthy.", []string{"kind"}, nil)
	descHealthy     = prometheus.NewDesc("baton_healthy", "1 while this device may sign (no storage fault, state digest agrees with the others', chain identity matches); 0 otherwise (see /healthz).", nil, nil)
)

func newMetrics(n *Node) *metrics {
	m := &metrics{n: n, reg: prometheus.NewRegistry(), tracked: map[string]time.Time{}}
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "baton_intent_signed_seconds",
		Help:    "Time from Submit on this device to the local apply of the commit that signed the intent.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.reg.MustRegister(m, m.latency, collectors.NewGoCollector(), n.ops.takeover,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(m, ch) }

// Collect implements prometheus.Collector: it reads the node's counters. Every gauge
// of a scrape, the operator ones too (collectOps), comes from one State: the registry
// runs its collectors concurrently, and two readings could disagree (a hold with no
// holder).
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	n := m.n
	g := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	c := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	st := n.State()
	for _, role := range []string{"Follower", "Candidate", "Leader", "Shutdown"} {
		v := 0.0
		if st.Raft.Role == role {
			v = 1
		}
		g(descRole, v, strings.ToLower(role)) // label values are lower case
	}
	g(descTerm, float64(st.Raft.Term))
	g(descCommitIdx, float64(st.Raft.CommitIndex))
	g(descAppliedIdx, float64(st.Raft.AppliedIndex))
	if st.Raft.LastContactMs >= 0 {
		g(descLastContact, float64(st.Raft.LastContactMs)/1000)
	}
	g(descEpoch, float64(st.Lease.Epoch))
	held := 0.0
	if st.Lease.HeldByMe {
		held = 1
	}
	g(descHeld, held)
	es := n.lease.Stats()
	c(descLeaseWrites, float64(es.Claims), "claim")
	c(descLeaseWrites, float64(es.Renews), "renew")
	c(descLeaseWrites, float64(es.Releases), "release")
	c(descLeaseWrites, float64(es.Transfers), "transfer")
	c(descLeaseWrites, float64(es.Steals), "steal")
	for r, v := range es.Rejections {
		c(descLeaseRej, float64(v), string(r))
	}
	c(descLeaseErrs, float64(es.ProposeErrors))
	c(descSkew, float64(es.SkewSuspicions))
	g(descHeadSeq, float64(st.Head.Seq))
	if n.loop != nil {
		ls := n.loop.Stats()
		c(descCommits, float64(ls.CommitsAccepted))
		c(descRefused, float64(ls.SignedRefused))
		c(descBumps, float64(ls.Bumps))
		for r, v := range ls.Rejections {
			c(descCommitsRej, float64(v), string(r))
		}
		for r, v := range ls.ContentRefused {
			c(descContentRef, float64(v), string(r))
		}
	}
	for r, v := range n.log.Rejections() {
		c(descRejections, float64(v), string(r))
	}
	g(descPending, float64(st.Pending))
	g(descMembers, float64(st.Members))
	healthy := 0.0
	if st.Healthy {
		healthy = 1
	}
	g(descHealthy, healthy)
	if st.ProblemKind != "" {
		g(descProblem, 1, st.ProblemKind)
	}
	collectOps(g, st) // metrics_ops.go
}

// Registry returns the node's Prometheus registry (what GET /metrics serves).
func (n *Node) Registry() *prometheus.Registry { return n.metrics.reg }

// trackedMaxAge: a timed submission not signed within this long is dropped when the
// table is full (its intent was lost to a failure, or signed while untracked).
const trackedMaxAge = 10 * time.Minute

// track starts timing id's intent-to-signed latency; it reports whether it did (not
// when id is timed already or the table is full).
func (m *metrics) track(id string, start time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tracked[id]; ok {
		return false
	}
	if len(m.tracked) >= maxTracked {
		for k, t0 := range m.tracked {
			if start.Sub(t0) > trackedMaxAge {
				delete(m.tracked, k)
			}
		}
	}
	if len(m.tracked) < maxTracked {
		m.tracked[id] = start
		return true
	}
	return false
}

// untrack stops timing id (a submission that failed, was refused, was a duplicate
// or was already signed).
func (m *metrics) untrack(id string) {
	m.mu.Lock()
	delete(m.tracked, id)
	m.mu.Unlock()
}

// follow feeds the latency histogram from applied commits until the node stops.
func (m *metrics) follow() {
	sub := m.n.log.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-m.n.ctx.Done():
			return
		case ev, ok := <-sub.C:
			if !ok {
				return
			}
			ca, isCommit := ev.(intentlog.CommitApplied)
			if !isCommit {
				continue
			}
			m.mu.Lock()
			if len(m.tracked) > 0 {
				// The apply's own decoding of the commit (no second decode here).
				now := time.Now()
				for _, op := range ca.Ops {
					if t0, ok := m.tracked[op.ID]; ok {
						m.latency.Observe(now.Sub(t0).Seconds())
						delete(m.tracked, op.ID)
					}
				}
			}
			m.mu.Unlock()
		}
	}
}
