package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/stages"
	"github.com/batonhq/baton/signer/node"
)

// TestTraceLoad is a diagnostic, not a check (BENCH_LOAD_TRACE=clients, e.g. 64):
// closed-loop clients submit signed intents to the holder that leads Raft (or, with
// BENCH_LOAD_BASELINE=1, raft.Apply on the raw baseline), the commit path's marks are
// recorded over one second after a warm-up (BENCH_LOAD_WARM, default 1s), and it
// prints the process's CPU, per replica how busy its Raft log writes and applies kept
// it and how large they were, the holder's own steps between commits, and where a
// commit's time went from its leader's log write to its future's answer. Intent IDs
// are per client, as the bench's (BENCH_LOAD_IDS=seq: one counter for all clients,
// whose IDs and paths sort together: fewer B-tree pages per commit).
func TestTraceLoad(t *testing.T) {
	clients, _ := strconv.Atoi(os.Getenv("BENCH_LOAD_TRACE"))
	if clients <= 0 {
		t.Skip("diagnostic: BENCH_LOAD_TRACE=<clients>")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	value := make([]byte, 200)
	var op func(id string) error
	if os.Getenv("BENCH_LOAD_BASELINE") != "" {
		bl, err := StartBaseline(ctx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer bl.Close()
		op = func(string) error { return bl.Apply(ctx, value) }
	} else {
		c, err := startCluster(ctx, t.TempDir(), 2*time.Second, 100*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dev, err := arrange(ctx, c, true)
		if err != nil {
			t.Fatal(err)
		}
		op = func(id string) error {
			_, err := submit(ctx, dev, id, value, node.WaitSigned)
			return err
		}
	}
	var n, done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	seqIDs := os.Getenv("BENCH_LOAD_IDS") == "seq"
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-%d", c, i)
				if seqIDs {
					id = fmt.Sprintf("t%d", n.Add(1))
				}
				if err := op(id); err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		})
	}
	warm := time.Second
	if d, err := time.ParseDuration(os.Getenv("BENCH_LOAD_WARM")); err == nil {
		warm = d
	}
	time.Sleep(warm) // warm up (diagnostic only)
	before := done.Load()
	_, cpu0, err := procUsage()
	if err != nil {
		t.Skip(err)
	}
	rec := stages.Start(1 << 22)
	window := time.Second
	time.Sleep(window)
	ev := rec.Stop()
	_, cpu1, _ := procUsage()
	cpu := cpu1 - cpu0
	after := done.Load()
	close(stop)
	wg.Wait()
	t.Logf("%d clients: %d signed intents in %v while recording (%d events), process CPU %.2f cores", clients, after-before, window, len(ev), cpu.Seconds()/window.Seconds())

	type span struct{ start, end time.Duration }
	type key struct {
		who    uintptr
		lo, hi uint64
	}
	stores, applies := map[key]*span{}, map[key]*span{}
	var signs []span
	var signStart time.Duration
	raftDone := map[uint64]time.Duration{}
	leaderWho := uintptr(0)
	for _, e := range ev {
		k := key{e.Who, e.Lo, e.Hi}
		switch e.Stage {
		case stages.StoreStart:
			stores[k] = &span{start: e.At}
		case stages.StoreEnd:
			if s := stores[k]; s != nil {
				s.end = e.At
			}
		case stages.ApplyStart:
			applies[k] = &span{start: e.At}
		case stages.ApplyEnd:
			if s := applies[k]; s != nil {
				s.end = e.At
			}
		case stages.SignStart:
			signStart = e.At
		case stages.Signed:
			signs = append(signs, span{signStart, e.At})
		case stages.RaftApply:
			if leaderWho == 0 {
				leaderWho = e.Who
			}
		case stages.RaftDone:
			raftDone[e.Lo] = e.At
		}
	}
	summary := func(what string, m map[key]*span) {
		per := map[uintptr][]key{}
		for k, s := range m {
			if s.end > 0 {
				per[k.who] = append(per[k.who], k)
			}
		}
		whos := make([]uintptr, 0, len(per))
		for w := range per {
			whos = append(whos, w)
		}
		sort.Slice(whos, func(i, j int) bool { return whos[i] < whos[j] })
		for _, w := range whos {
			var busy time.Duration
			var entries uint64
			var durs []time.Duration
			for _, k := range per[w] {
				d := m[k].end - m[k].start
				busy += d
				durs = append(durs, d)
				entries += k.hi - k.lo + 1
			}
			role := "follower"
			if w == leaderWho {
				role = "leader"
			}
			t.Logf("%-8s %d (%s): %4d calls, %.1f entries each, p50 %.3f ms, busy %.0f%% of the window",
				what, w, role, len(durs), float64(entries)/float64(len(durs)), Summarise(durs).P50Ms, 100*float64(busy)/float64(window))
		}
	}
	summary("store", stores)
	summary("apply", applies)
	var sb time.Duration
	for _, s := range signs {
		sb += s.end - s.start
	}
	if len(signs) > 0 {
		t.Logf("sign: %d commits, mean %v, busy %.0f%%; %.1f intents per commit", len(signs), sb/time.Duration(len(signs)), 100*float64(sb)/float64(window), float64(after-before)/float64(len(signs)))
	}
	// A commit's path on the leader by Raft index: its log write's start and end, the
	// first follower's write end, the leader's apply start, the future's answer.
	leaderStore, followerEnd, leaderApply := map[uint64]*span{}, map[uint64]time.Duration{}, map[uint64]*span{}
	for k, s := range stores {
		for i := k.lo; i <= k.hi; i++ {
			if k.who == leaderWho {
				leaderStore[i] = s
			} else if s.end > 0 && (followerEnd[i] == 0 || s.end < followerEnd[i]) {
				followerEnd[i] = s.end
			}
		}
	}
	for k, s := range applies {
		if k.who != leaderWho {
			continue
		}
		for i := k.lo; i <= k.hi; i++ {
			leaderApply[i] = s
		}
	}
	var segs [4][]time.Duration
	for i, done := range raftDone {
		ls, la, fe := leaderStore[i], leaderApply[i], followerEnd[i]
		if ls == nil || la == nil || fe == 0 || ls.end == 0 {
			continue
		}
		segs[0] = append(segs[0], ls.end-ls.start)
		segs[1] = append(segs[1], fe-ls.end)
		segs[2] = append(segs[2], la.start-fe)
		segs[3] = append(segs[3], done-la.start)
	}
	// The holder's own path between commits, by order: a future's answer to the next
	// signature's start, the signature, and the signature's end to raft.Apply.
	var holder []stages.Event
	for _, e := range ev {
		switch e.Stage {
		case stages.RaftDone, stages.SignStart, stages.Signed:
			holder = append(holder, e)
		case stages.RaftApply:
			if e.Who == leaderWho {
				holder = append(holder, e)
			}
		}
	}
	var gaps [3][]time.Duration
	for i := 1; i < len(holder); i++ {
		a, b := holder[i-1], holder[i]
		switch {
		case a.Stage == stages.RaftDone && b.Stage == stages.SignStart:
			gaps[0] = append(gaps[0], b.At-a.At)
		case a.Stage == stages.SignStart && b.Stage == stages.Signed:
			gaps[1] = append(gaps[1], b.At-a.At)
		case a.Stage == stages.Signed && b.Stage == stages.RaftApply:
			gaps[2] = append(gaps[2], b.At-a.At)
		}
	}
	for j, name := range []string{"a future's answer to the next signature", "the signature", "signature to raft.Apply"} {
		if s := gaps[j]; len(s) > 0 {
			t.Logf("holder: %-45s p50 %.3f ms (%d)", name, Summarise(s).P50Ms, len(s))
		}
	}
	names := []string{"leader write", "leader write end to first follower write end", "to the leader's apply start", "apply start to the future's answer"}
	for j, s := range segs {
		if len(s) == 0 {
			continue
		}
		t.Logf("commit: %-45s p50 %.3f ms (%d commits)", names[j], Summarise(s).P50Ms, len(s))
	}
}
