package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// `baton sim` runs a search in worker processes (`baton sim --worker`), each running
// one seed at a time on one P with Raft's random source seeded from the seed. That
// costs nothing in throughput (seeds are independent) and buys two things an
// in-process search cannot have:
//
//   - a finding replays: `baton sim --seed N` runs the seed the same way (alone, on
//     one P, same seeding), so the interleavings match far more often than a seed
//     found among parallel runs in one process (docs/DRILLS.md has the rates);
//   - a panic in the code under test (intentlog panics on a broken invariant) kills
//     one worker, not the search: the seed it was running is reported as a "panic"
//     violation with the tail of the worker's stderr, and a new worker takes over.
//
// The protocol: the parent writes a seed per line on the worker's stdin; the worker
// answers each with one line of JSON, the seed's Result without its events (the
// worker writes a failed seed's files itself).

// workerCommand returns the command that starts a worker with args. The default
// re-runs this executable with the arguments that led to Main (mainPrefix), then
// args; tests replace it.
var workerCommand = func(args []string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("sim: find this executable: %w", err)
	}
	return exec.Command(self, append(append([]string(nil), mainPrefix...), args...)...), nil
}

// mainPrefix is os.Args[1:] up to the arguments Main was given (for baton: "sim").
var mainPrefix []string

func setMainPrefix(args []string) {
	if n := len(os.Args) - len(args); n >= 1 && strings.Join(os.Args[n:], "\x00") == strings.Join(args, "\x00") {
		mainPrefix = append([]string(nil), os.Args[1:n]...)
	}
}

// workerArgs are the flags of `baton sim --worker` that make its runs c's (but for
// the seed), writing failed seeds' files to out.
func workerArgs(c Config, out string) []string {
	args := []string{"--worker"}
	add := func(name, val string) { args = append(args, "--"+name+"="+val) }
	if c.Duration != 0 {
		add("time", c.Duration.String())
	}
	if c.Profile != "" {
		add("profile", c.Profile)
	}
	if c.Devices != 0 {
		add("nodes", strconv.Itoa(c.Devices))
	}
	if c.TTL != 0 {
		add("ttl", c.TTL.String())
	}
	if c.Tick != 0 {
		add("tick", c.Tick.String())
	}
	if k := c.Knobs.String(); k != "" {
		add("knobs", k)
	}
	if c.Format != "" {
		add("format", c.Format)
	}
	if c.Keep {
		add("keep", "true")
	}
	add("out", out)
	return args
}

// searchInWorkers runs o's seeds in o.Parallel worker processes.
func searchInWorkers(ctx context.Context, o SearchOptions) *SearchSummary {
	flags := workerArgs(o.Base, o.Out)
	if o.Parallel <= 0 {
		o.Parallel = defaultParallel()
	}
	procs := make([]*workerProc, o.Parallel)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.close()
			}
		}
	}()
	o.stop = ctx.Done()
	s := search(o, func(i int, cfg Config) *Result {
		if procs[i] == nil {
			p, err := startWorker(flags)
			if err != nil {
				return crashResult(cfg, err, "")
			}
			procs[i] = p
		}
		res, err := procs[i].run(cfg.Seed)
		if err != nil {
			tail := procs[i].stderr.String()
			procs[i].close()
			procs[i] = nil
			if ctx.Err() != nil {
				return nil // interrupted: not a finding
			}
			return crashResult(cfg, err, tail)
		}
		if res.incomplete() {
			// The worker lives on, but what ended the run (under -race: a data race
			// the testing package counted) is on its stderr only.
			res.Violations[0].Detail += "\n" + procs[i].seedStderr(cfg.Seed)
		}
		return res
	})
	return s
}

// errNotComplete is a worker's answer for a seed whose run ended without a Result:
// the testing package failed it (under -race: a data race it counted; or Run's setup
// failed). Why is on the worker's stderr.
var errNotComplete = errors.New("the run did not complete")

// incomplete reports whether r is a worker's errNotComplete answer.
func (r *Result) incomplete() bool {
	return len(r.Violations) == 1 && r.Violations[0].Kind == VPanic && r.Violations[0].Detail == errNotComplete.Error()
}

func crashResult(cfg Config, err error, tail string) *Result {
	detail := fmt.Sprintf("the worker process running the seed died: %v", err)
	if tail != "" {
		detail += "\n" + tail
	}
	return failedRun(cfg, detail)
}

// failedRun is the Result of a run that did not complete, for detail.
func failedRun(cfg Config, detail string) *Result {
	return &Result{Config: cfg, Violations: []Violation{{Kind: VPanic, Dev: -1, Detail: detail}},
		Found: map[string]int{VPanic: 1}, Failover: -1}
}

type workerProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *tailBuffer
}

func startWorker(flags []string) (*workerProc, error) {
	cmd, err := workerCommand(flags)
	if err != nil {
		return nil, err
	}
	p := &workerProc{cmd: cmd, stderr: &tailBuffer{max: 16 << 10}}
	cmd.Stderr = p.stderr
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReaderSize(out, 1<<20)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sim: start a worker: %w", err)
	}
	return p, nil
}

func (p *workerProc) run(seed int64) (*Result, error) {
	p.stderr.reset() // what the worker prints from here on is this seed's
	if _, err := fmt.Fprintf(p.in, "%d\n", seed); err != nil {
		return nil, err
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		if werr := p.cmd.Wait(); werr != nil {
			err = werr
		}
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("sim: a worker's answer: %w", err)
	}
	if r.Config.Seed != seed {
		return nil, fmt.Errorf("sim: a worker answered seed %d for seed %d", r.Config.Seed, seed)
	}
	return &r, nil
}

// seedStderr returns what the worker wrote on stderr while it ran seed, waiting (at
// most 10 s) for the line it writes after its answer.
func (p *workerProc) seedStderr(seed int64) string {
	done := fmt.Sprintf("%s%d\n", seedDone, seed)
	for deadline := time.Now().Add(10 * time.Second); ; {
		s := p.stderr.String()
		if before, _, ok := strings.Cut(s, done); ok {
			if i := strings.LastIndex(before, seedDone); i >= 0 { // the seed before's line
				_, before, _ = strings.Cut(before[i:], "\n")
			}
			return before
		}
		if time.Now().After(deadline) {
			return s + "(the worker's stderr did not reach the end of the seed in 10s)"
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *workerProc) close() {
	_ = p.in.Close() // the worker exits at EOF
	_ = p.cmd.Wait()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = t.b[:0]
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// seedDone starts the line a worker writes on stderr after its answer for a seed, so
// that the parent knows when it has all the seed's stderr (a pipe of its own).
const seedDone = "baton sim --worker: done with seed "

// workerRunHook, when set (by the package's tests), runs before each of a worker's
// runs; false ends the run as the testing package ends one it failed.
var workerRunHook func(t *testing.T, seed int64) bool

// workerMain is `baton sim --worker`: run the seeds read from in, one at a time,
// answering each with its Result as one JSON line (without the run's 4096 events: a
// failed seed's files are written to out here).
func workerMain(base Config, out string, in io.Reader, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	err := withT(func(t *testing.T) {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			seed, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
			if err != nil {
				fmt.Fprintf(stderr, "baton sim --worker: bad seed %q\n", sc.Text())
				return
			}
			cfg := base
			cfg.Seed = seed
			var res *Result
			check := cfg
			if err := check.setDefaults(); err != nil { // Run's setup would fail its t with it
				res = failedRun(cfg, "the run could not be set up: "+err.Error())
			} else {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					if workerRunHook != nil && !workerRunHook(t, seed) {
						return
					}
					res = Run(t, cfg)
				})
			}
			if res == nil {
				res = failedRun(cfg, errNotComplete.Error())
			}
			if !res.OK() && out != "" {
				if err := res.WriteFiles(out); err != nil {
					fmt.Fprintf(stderr, "baton sim --worker: %v\n", err)
				}
			}
			res.Events = nil // in the files; each violation keeps the events before it
			if err := enc.Encode(res); err != nil {
				fmt.Fprintf(stderr, "baton sim --worker: %v\n", err)
				return
			}
			fmt.Fprintf(stderr, "%s%d\n", seedDone, seed) // what came before is this seed's
		}
	})
	if err != nil {
		fmt.Fprintf(stderr, "baton sim --worker: %v\n", err)
		return 1
	}
	return 0
}

// seedableGlobalRand makes math/rand.Seed work (GODEBUG randseednop=0; Go reads a
// GODEBUG set at run time) and checks that it does.
func seedableGlobalRand() error {
	gd := os.Getenv("GODEBUG")
	if gd != "" {
		gd += ","
	}
	if err := os.Setenv("GODEBUG", gd+"randseednop=0"); err != nil {
		return err
	}
	mrand.Seed(1) //lint:ignore SA1019 the point is the global source Raft uses
	a := mrand.Int63()
	mrand.Seed(1) //lint:ignore SA1019 as above
	if b := mrand.Int63(); a != b {
		return errors.New("sim: math/rand's global source cannot be seeded (GODEBUG randseednop=0 had no effect)")
	}
	return nil
}
