package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/testnet"
)

// SectionStages is the latency breakdown of one signed intent at one client.
const SectionStages = "stages"

// StageRow is one segment of the commit path: the median over the traced rounds of
// the time from one stage to the next.
type StageRow struct {
	Segment string  `json:"segment"`
	P50Ms   float64 `json:"p50_ms"`
	MeanMs  float64 `json:"mean_ms"`
	// OnPath: the segment is on the submission's critical path (the rows on the path
	// add up to the round); the others run beside it (a follower's write, the
	// followers' applies).
	OnPath bool `json:"on_path"`
}

// StageBreakdown is the trace of sequential one-client rounds through one API.
type StageBreakdown struct {
	API    string     `json:"api"`
	Rounds int        `json:"rounds"`           // traced rounds kept (those with one Raft proposal)
	GapMs  float64    `json:"gap_ms,omitempty"` // the pause before each round (--stage-gap)
	Total  Dist       `json:"total"`            // client send to client done
	Rows   []StageRow `json:"rows"`
}

// segment is a span between two points of a traced round.
type segment struct {
	name     string
	from, to point
	onPath   bool
	signed   bool // may be negative: the two points overlap (kept, not dropped as misordered)
}

// point names a mark of a round: a stage on the holder (key-0 stages) or, for the
// Raft-level stages, on the leader or on the first follower to finish its write.
type point struct {
	stage stages.Stage
	where int // 0: the holder's own stage; 1: the leader replica; 2: the quorum follower; 3: the last follower
}

func at(s stages.Stage) point       { return point{s, 0} }
func leaderAt(s stages.Stage) point { return point{s, 1} }
func folAt(s stages.Stage) point    { return point{s, 2} }
func lastAt(s stages.Stage) point   { return point{s, 3} }

// raftSegments are the Raft round's rows, shared by baton and the baseline.
// hashicorp/raft's leader writes (and fsyncs) its log before it triggers
// replication: in the baseline the two writes are in series. baton's leader sends
// the batch ahead to its followers while it writes it (intentlog/ahead.go): a
// follower's write may start before the leader's ends, and that row is negative.
func raftSegments(applyRows []segment) []segment {
	s := []segment{
		{"raft: apply queue to the leader's log write", leaderAt(stages.RaftApply), leaderAt(stages.StoreStart), true, false},
		{"raft: leader log write and fsync", leaderAt(stages.StoreStart), leaderAt(stages.StoreEnd), true, false},
		{"raft: leader write end to follower write start (AppendEntries; negative: sent ahead, overlapping)", leaderAt(stages.StoreEnd), folAt(stages.StoreStart), true, true},
		{"raft: follower log write and fsync", folAt(stages.StoreStart), folAt(stages.StoreEnd), true, false},
		{"raft: follower answer, commit, to the leader's apply", folAt(stages.StoreEnd), leaderAt(stages.ApplyStart), true, false},
	}
	s = append(s, applyRows...)
	return append(s, segment{"raft: apply to the future's answer", leaderAt(stages.ApplyEnd), leaderAt(stages.RaftDone), true, false})
}

// besideRows are the followers' applies, off the path.
var besideRows = []segment{
	{"beside: leader's apply end to the last follower's apply end", leaderAt(stages.ApplyEnd), lastAt(stages.ApplyEnd), false, false},
	{"beside: a follower's apply", lastAt(stages.ApplyStart), lastAt(stages.ApplyEnd), false, false},
}

// stageSegments are the rows of the breakdown, in path order, through api "go",
// "socket" or "raft" (the baseline: raft.Apply on the leader, a trivial FSM).
func stageSegments(api string) []segment {
	if api == "raft" {
		s := []segment{{"client to raft.Apply", at(stages.ClientSend), leaderAt(stages.RaftApply), true, false}}
		s = append(s, raftSegments([]segment{{"leader apply (trivial FSM)", leaderAt(stages.ApplyStart), leaderAt(stages.ApplyEnd), true, false}})...)
		s = append(s, segment{"future to the client", leaderAt(stages.RaftDone), at(stages.ClientDone), true, false})
		return append(s, besideRows...)
	}
	var s []segment
	if api == "socket" {
		s = append(s,
			segment{"client to API handler (HTTP request over the socket)", at(stages.ClientSend), at(stages.APIStart), true, false},
			segment{"API decode and validate (JSON, base64)", at(stages.APIStart), at(stages.APIDecoded), true, false},
			segment{"API to Node.Submit", at(stages.APIDecoded), at(stages.SubmitStart), true, false})
	} else {
		s = append(s, segment{"client to Node.Submit", at(stages.ClientSend), at(stages.SubmitStart), true, false})
	}
	s = append(s,
		segment{"Submit: validate, dedupe read, hand to the loop", at(stages.SubmitStart), at(stages.Queued), true, false},
		segment{"hand-off to the signer goroutine, build", at(stages.Queued), at(stages.SignStart), true, false},
		segment{"sign (CBOR, ed25519)", at(stages.SignStart), at(stages.Signed), true, false},
		segment{"propose: goroutine, encode, decode, to raft.Apply", at(stages.Signed), leaderAt(stages.RaftApply), true, false},
	)
	s = append(s, raftSegments([]segment{
		{"leader apply: decode and verify the commit", leaderAt(stages.ApplyStart), leaderAt(stages.Verified), true, false},
		{"leader apply: checks, bbolt transaction, publish", leaderAt(stages.Verified), leaderAt(stages.ApplyEnd), true, false},
	})...)
	s = append(s,
		segment{"result encode/decode, signer loop answers", leaderAt(stages.RaftDone), at(stages.Answered), true, false},
		segment{"ticket to Submit's return (wait signed)", at(stages.Answered), at(stages.SubmitDone), true, false},
	)
	if api == "socket" {
		s = append(s,
			segment{"Submit to API response", at(stages.SubmitDone), at(stages.APIAnswered), true, false},
			segment{"API response to the client (JSON, HTTP)", at(stages.APIAnswered), at(stages.ClientDone), true, false})
	} else {
		s = append(s, segment{"Submit to the client", at(stages.SubmitDone), at(stages.ClientDone), true, false})
	}
	return append(s, besideRows...)
}

// traceStages runs rounds sequential signed submissions through submit with the
// stage recorder on, each after a pause of gap, and returns the breakdown.
func traceStages(ctx context.Context, apiName string, rounds int, gap time.Duration, payload int, submit submitter) (StageBreakdown, error) {
	value := make([]byte, payload)
	run := runSeq.Add(1)
	rec := stages.Start(rounds * 64)
	for i := 0; i < rounds; i++ {
		if gap > 0 {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				rec.Stop()
				return StageBreakdown{}, ctx.Err()
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		stages.Mark(stages.ClientSend, 0, 0, 0)
		err := submit(sctx, 0, fmt.Sprintf("st%d-%d", run, i), value, node.WaitSigned)
		stages.Mark(stages.ClientDone, 0, 0, 0)
		cancel()
		if err != nil {
			rec.Stop()
			return StageBreakdown{}, err
		}
	}
	// The followers apply the last round only after a later append (a renewal, a
	// heartbeat's commit index): its "beside" rows may be missing, never wrong.
	evs := rec.Stop()
	b := analyseStages(apiName, evs)
	b.GapMs = float64(gap) / float64(time.Millisecond)
	return b, nil
}

// analyseStages cuts the events into rounds (ClientSend .. ClientDone), keeps the
// rounds with exactly one Raft proposal, and takes each segment's median.
func analyseStages(apiName string, evs []stages.Event) StageBreakdown {
	segs := stageSegments(apiName)
	vals := make([][]time.Duration, len(segs))
	var totals []time.Duration
	var kept int
	for i := 0; i < len(evs); i++ {
		if evs[i].Stage != stages.ClientSend {
			continue
		}
		j := i + 1
		for j < len(evs) && evs[j].Stage != stages.ClientDone {
			j++
		}
		if j == len(evs) {
			break
		}
		round := evs[i : j+1]
		total := evs[j].At - evs[i].At
		i = j
		pts, ok := roundPoints(round, evs)
		if !ok {
			continue
		}
		kept++
		totals = append(totals, total)
		for k, s := range segs {
			a, okA := pts[s.from]
			b, okB := pts[s.to]
			if okA && okB && (b >= a || s.signed) {
				vals[k] = append(vals[k], b-a)
			}
		}
	}
	out := StageBreakdown{API: apiName, Rounds: kept, Total: Summarise(totals)}
	for k, s := range segs {
		d := Summarise(vals[k])
		if d.N == 0 {
			continue
		}
		out.Rows = append(out.Rows, StageRow{Segment: s.name, P50Ms: round3(d.P50Ms), MeanMs: round3(d.MeanMs), OnPath: s.onPath})
	}
	return out
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// roundPoints finds the points of one round: the holder's stages in the round, the
// leader (the replica that called raft.Apply: exactly once, else the round is
// skipped), the commit's Raft index (the loop's answer), and the Raft-level stages
// covering that index anywhere in the trace (a follower applies after the round).
func roundPoints(round, all []stages.Event) (map[point]time.Duration, bool) {
	pts := map[point]time.Duration{}
	var leader uintptr
	applies := 0
	var idx uint64
	for _, e := range round {
		switch {
		case e.Stage == stages.RaftApply:
			applies++
			leader = e.Who
			pts[leaderAt(stages.RaftApply)] = e.At
		case e.Stage == stages.Answered:
			idx = e.Lo
			pts[at(e.Stage)] = e.At
		case e.Who == 0:
			if _, seen := pts[at(e.Stage)]; !seen {
				pts[at(e.Stage)] = e.At
			}
		}
	}
	if applies != 1 || idx == 0 {
		return nil, false
	}
	// Raft-level events of idx, per replica.
	type rep struct {
		marks map[stages.Stage]time.Duration
	}
	reps := map[uintptr]*rep{}
	for _, e := range all {
		if e.Who == 0 || e.Lo == 0 || e.Lo > idx || e.Hi < idx {
			continue
		}
		if e.Stage == stages.RaftDone && e.Lo != idx {
			continue
		}
		r := reps[e.Who]
		if r == nil {
			r = &rep{marks: map[stages.Stage]time.Duration{}}
			reps[e.Who] = r
		}
		if _, seen := r.marks[e.Stage]; !seen {
			r.marks[e.Stage] = e.At
		}
	}
	// The leader's Verified carries no index: the first one after its ApplyStart.
	for who, r := range reps {
		if s, ok := r.marks[stages.ApplyStart]; ok {
			for _, e := range all {
				if e.Who == who && e.Stage == stages.Verified && e.At >= s {
					if end, ok := r.marks[stages.ApplyEnd]; !ok || e.At <= end {
						r.marks[stages.Verified] = e.At
					}
					break
				}
			}
		}
	}
	lr := reps[leader]
	if lr == nil {
		return nil, false
	}
	for s, t := range lr.marks {
		if s != stages.RaftApply {
			pts[leaderAt(s)] = t
		}
	}
	var fols []*rep
	for who, r := range reps {
		if who != leader {
			fols = append(fols, r)
		}
	}
	// The quorum follower finished its write first; the last follower applied last.
	endOf := func(r *rep, s stages.Stage) time.Duration {
		if t, ok := r.marks[s]; ok {
			return t
		}
		return 1<<63 - 1
	}
	if len(fols) > 0 {
		slices.SortFunc(fols, func(a, b *rep) int { return cmpDur(endOf(a, stages.StoreEnd), endOf(b, stages.StoreEnd)) })
		for s, t := range fols[0].marks {
			pts[folAt(s)] = t
		}
		// The last follower whose apply the trace holds (the last round's may be
		// missing: followers apply it after a later append).
		var last *rep
		for _, f := range fols {
			if _, ok := f.marks[stages.ApplyEnd]; ok && (last == nil || f.marks[stages.ApplyEnd] > last.marks[stages.ApplyEnd]) {
				last = f
			}
		}
		if last != nil {
			for s, t := range last.marks {
				pts[lastAt(s)] = t
			}
		}
	}
	return pts, true
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// runStages traces one-client rounds through the Go API and the socket API of the
// holder that leads Raft.
func runStages(ctx context.Context, o Options, c *testnet.Cluster, r *Report) error {
	dev, err := arrange(ctx, c, true)
	if err != nil {
		return err
	}
	rounds := o.StageRounds
	goAPI := func(ctx context.Context, _ int, id string, value []byte, wait node.Wait) error {
		_, err := submit(ctx, dev, id, value, wait)
		return err
	}
	sock := newSocketClients(filepath.Join(dev.Dir, api.SocketFile))
	defer sock.close()
	for _, via := range []struct {
		name string
		f    submitter
	}{{"go", goAPI}, {"socket", sock.submit}} {
		// Warm up the path (connections, the first commits) untraced.
		for i := 0; i < 20; i++ {
			if err := via.f(ctx, 0, fmt.Sprintf("stw%d-%d", runSeq.Add(1), i), make([]byte, o.Payload), node.WaitSigned); err != nil {
				return fmt.Errorf("stages warm-up: %w", err)
			}
		}
		b, err := traceStages(ctx, via.name, rounds, o.StageGap, o.Payload, via.f)
		if err != nil {
			return fmt.Errorf("stages, %s: %w", via.name, err)
		}
		r.Stages = append(r.Stages, b)
		o.progress("stages %s: %d rounds, p50 %.2f ms", via.name, b.Rounds, b.Total.P50Ms)
	}
	return nil
}

// printStages writes the breakdowns.
func printStages(w io.Writer, bs []StageBreakdown) {
	var raw float64
	for _, b := range bs {
		if b.API == "raft" {
			raw = b.Total.P50Ms
		}
	}
	for _, b := range bs {
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
		what := "one signed intent at one client, " + b.API + " API"
		if b.API == "raft" {
			what = "one raft.Apply at one writer, raft baseline"
		}
		ratio := ""
		if raw > 0 && b.API != "raft" {
			ratio = fmt.Sprintf(", %.2fx the baseline's traced round", b.Total.P50Ms/raw)
		}
		gap := ""
		if b.GapMs > 0 {
			gap = fmt.Sprintf(" (each after a %g ms pause)", b.GapMs)
		}
		fmt.Fprintf(w, "%s: %d traced rounds%s, p50 %.3f ms (mean %.3f)%s\n", what, b.Rounds, gap, b.Total.P50Ms, b.Total.MeanMs, ratio)
		fmt.Fprintf(tw, "segment\tp50 ms\tmean ms\ton the path\t\n")
		var sum float64
		for _, x := range b.Rows {
			on := "beside"
			if x.OnPath {
				on = "yes"
				sum += x.P50Ms
			}
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%s\t\n", x.Segment, x.P50Ms, x.MeanMs, on)
		}
		_ = tw.Flush()
		fmt.Fprintf(w, "(sum of the on-path medians %.3f ms; medians do not add up exactly)\n\n", sum)
	}
}
