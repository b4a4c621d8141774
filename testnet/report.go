package testnet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Event kinds on the timeline.
const (
	EventKill      = "kill"
	EventRestart   = "restart"
	EventStop      = "stop"
	EventPause     = "pause"
	EventResume    = "resume"
	EventPartition = "partition"
	EventHeal      = "heal"
	EventSkew      = "skew"
	EventDrift     = "drift"
	EventJoin      = "join"
	EventLeave     = "leave"
	EventRelease   = "release"
	EventTransfer  = "transfer"
	EventNote      = "note"
)

// Event is one thing that happened during a drill: a fault injected, a device
// joining, a note. Device is the device's name, empty for cluster-wide events.
type Event struct {
	At     time.Time `json:"at"`
	Device string    `json:"device,omitempty"`
	Kind   string    `json:"kind"`
	Label  string    `json:"label"`
}

// Span is one interval during which a device held the lease (as its own replica
// said), at one epoch.
type Span struct {
	Device string    `json:"device"`
	Epoch  uint64    `json:"epoch"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
}

// Mark is a device becoming Raft leader.
type Mark struct {
	Device string    `json:"device"`
	At     time.Time `json:"at"`
}

// Point is one sample of the chain's growth: the highest seq applied anywhere and
// the highest epoch a head carried by then.
type Point struct {
	At    time.Time `json:"at"`
	Seq   uint64    `json:"seq"`
	Epoch uint64    `json:"epoch,omitempty"`
}

// DeviceInfo names a device.
type DeviceInfo struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	Label string `json:"label"` // name and the end of the peer ID: "d1 (…aN1816)"
}

// Device span states.
const (
	SpanDown   = "down"   // killed or stopped, until restarted
	SpanPaused = "paused" // frozen, until resumed
	SpanLeft   = "left"   // removed from the cluster, until it rejoined
)

// DeviceSpan is an interval a device was down, paused or out of the cluster.
type DeviceSpan struct {
	Device string    `json:"device"`
	State  string    `json:"state"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Cause  string    `json:"cause"`
}

// Round is one fault a drill injected and what followed: who it hit, whether a
// takeover followed and how long it took. Failover is from the fault to the first
// commit applied under a new holder (zero when the lease did not move).
type Round struct {
	N         int           `json:"n"`
	Kind      string        `json:"kind"`
	Device    string        `json:"device"`           // the device it hit (label)
	Holder    bool          `json:"holder,omitempty"` // it held the lease
	At        time.Time     `json:"at"`
	Failover  time.Duration `json:"failover_ns,omitempty"`
	FromEpoch uint64        `json:"from_epoch,omitempty"`
	ToEpoch   uint64        `json:"to_epoch,omitempty"`
	NewHolder string        `json:"new_holder,omitempty"`
	Took      time.Duration `json:"took_ns"` // the whole round, recovery included
	// CatchUp is how long the device the fault took away needed, once back, to
	// apply the head the others had (zero when it never went away).
	CatchUp time.Duration `json:"catch_up_ns,omitempty"`
	// Over: Failover exceeded the kind's bound (TTL + tick + one election; 2×TTL for
	// a skewed clock).
	Over bool `json:"over,omitempty"`
	// Refused counts signed commits the apply refused whose entry was appended
	// during this round.
	Refused int    `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
}

// LoadBucket is the load generator's outcome over one time bucket.
type LoadBucket struct {
	At     time.Time `json:"at"`
	Acked  int       `json:"acked"`
	Failed int       `json:"failed"`
}

// Params are a drill's parameters.
type Params struct {
	Nodes     int           `json:"nodes"`
	TTL       time.Duration `json:"ttl_ns"`
	Tick      time.Duration `json:"tick_ns"`
	Election  time.Duration `json:"election_ns"` // one Raft election's allowance in bounds
	Rounds    int           `json:"rounds"`
	Duration  time.Duration `json:"duration_ns,omitempty"` // soak: run until this much time passed
	Procs     bool          `json:"procs"`
	FaultFree bool          `json:"fault_free,omitempty"`
	Format    string        `json:"format,omitempty"` // the chain's commit format ("": baton's)
}

// Counts summarise the load and the chain.
type Counts struct {
	Submitted int `json:"submitted"`
	Acked     int `json:"acked"`
	Failed    int `json:"failed"`            // submissions that got an error (not acknowledged: allowed)
	Retried   int `json:"retried,omitempty"` // resubmissions of a failed id (LoadConfig.Retries)
	// Cancelled counts submissions still waiting when the generator stopped: their
	// outcome is unknown to the client (they may be in the chain), not a failure.
	Cancelled int `json:"cancelled,omitempty"`
	// Errors counts the failed submissions by the API's error code of their last try.
	Errors    map[string]int `json:"errors,omitempty"`
	Commits   int            `json:"commits"`
	Intents   int            `json:"intents"`
	Failovers int            `json:"failovers"`
}

// Report is one scenario's outcome: what was done, what was seen, the checker's
// verdict. It marshals to report.json and renders to report.html (RenderHTML).
type Report struct {
	Scenario string       `json:"scenario"`
	Params   Params       `json:"params"`
	Seed     int64        `json:"seed"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Devices  []DeviceInfo `json:"devices"`
	Events   []Event      `json:"events"`
	Holds    []Span       `json:"holds"`
	Leaders  []Mark       `json:"leaders"`
	Growth   []Point      `json:"growth"`
	Downs    []DeviceSpan `json:"downs"`
	Rounds   []Round      `json:"rounds"`
	Load     []LoadBucket `json:"load"`
	Check    CheckResult  `json:"check"`
	Counts   Counts       `json:"counts"`
	// Summary condenses Rounds and Check: per fault kind, totals, worst rounds.
	Summary Summary `json:"summary"`
	// Rejections are the log entries the apply refused, by reason (the most any
	// replica counted): epoch_mismatch, not_holder, bad_prev... are the fencing at
	// work against stale holders and lost claim races.
	Rejections map[string]uint64 `json:"rejections,omitempty"`
	// Error is set when the drill itself failed (a fault could not be injected, the
	// cluster never converged); such a report is not OK.
	Error string `json:"error,omitempty"`
	OK    bool   `json:"ok"`
}

// Finish fills in OK from the checker's result and Error, and the summary.
func (r *Report) Finish() {
	r.OK = r.Error == "" && r.Check.OK()
	r.Counts.Commits = r.Check.Commits
	r.Counts.Intents = r.Check.Intents
	r.Counts.Failovers = len(r.Check.Failovers)
	r.Summary = summarise(r)
	r.Growth = thinGrowth(r.Growth, r.Summary.Worst, r.Started, r.Finished)
}

// maxGrowth bounds the growth points a report keeps outside the worst rounds.
const maxGrowth = 4000

// thinGrowth keeps every point around the worst rounds (their zoomed timelines) and
// every epoch change, and elsewhere about maxGrowth points spread evenly.
func thinGrowth(ps []Point, worst []Round, from, to time.Time) []Point {
	if len(ps) <= 2*maxGrowth || !to.After(from) {
		return ps
	}
	keep := func(t time.Time) bool {
		for _, w := range worst {
			if !t.Before(w.At.Add(-2*time.Second)) && !t.After(w.At.Add(w.Took+2*time.Second)) {
				return true
			}
		}
		return false
	}
	bucket := to.Sub(from) / maxGrowth
	var out []Point
	for i, p := range ps {
		n := len(out)
		if i == 0 || keep(p.At) || out[n-1].Epoch != p.Epoch || p.At.Sub(out[n-1].At) >= bucket || i == len(ps)-1 {
			out = append(out, p)
		} else if n > 1 && out[n-2].Epoch == p.Epoch && !keep(out[n-1].At) {
			out[n-1] = p // a busy stretch: its last point stands for it
		}
	}
	return out
}

// label returns the label of the device named name (the name itself if unknown).
func (r *Report) label(name string) string {
	for _, d := range r.Devices {
		if d.Name == name {
			if d.Label != "" {
				return d.Label
			}
			return deviceLabel(d.Name, d.ID)
		}
	}
	return name
}

// Suite is the outcome of one `baton drill` run: one Report per scenario.
type Suite struct {
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Reports []Report  `json:"reports"`
	OK      bool      `json:"ok"`
}

// WriteFiles writes report.json and report.html into dir (created if missing).
func (s *Suite) WriteFiles(dir string) error {
	s.OK = len(s.Reports) > 0
	for _, r := range s.Reports {
		s.OK = s.OK && r.OK
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create report dir: %w", err)
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.html"), []byte(RenderHTML(s)), 0o644); err != nil {
		return fmt.Errorf("write report.html: %w", err)
	}
	return nil
}
