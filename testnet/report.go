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

// Point is one sample of the chain's growth: the highest seq applied anywhere.
type Point struct {
	At  time.Time `json:"at"`
	Seq uint64    `json:"seq"`
}

// DeviceInfo names a device.
type DeviceInfo struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// Params are a drill's parameters.
type Params struct {
	Nodes  int           `json:"nodes"`
	TTL    time.Duration `json:"ttl_ns"`
	Tick   time.Duration `json:"tick_ns"`
	Rounds int           `json:"rounds"`
	Procs  bool          `json:"procs"`
}

// Counts summarise the load and the chain.
type Counts struct {
	Submitted int `json:"submitted"`
	Acked     int `json:"acked"`
	Failed    int `json:"failed"` // submissions that got an error (not acknowledged: allowed)
	Commits   int `json:"commits"`
	Intents   int `json:"intents"`
	Failovers int `json:"failovers"`
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
	Check    CheckResult  `json:"check"`
	Counts   Counts       `json:"counts"`
	// Rejections are the log entries the apply refused, by reason (the most any
	// replica counted): epoch_mismatch, not_holder, bad_prev... are the fencing at
	// work against stale holders and lost claim races.
	Rejections map[string]uint64 `json:"rejections,omitempty"`
	// Error is set when the drill itself failed (a fault could not be injected, the
	// cluster never converged); such a report is not OK.
	Error string `json:"error,omitempty"`
	OK    bool   `json:"ok"`
}

// Finish fills in OK from the checker's result and Error.
func (r *Report) Finish() {
	r.OK = r.Error == "" && r.Check.OK()
	r.Counts.Commits = r.Check.Commits
	r.Counts.Intents = r.Check.Intents
	r.Counts.Failovers = len(r.Check.Failovers)
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
