package sim

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// TestSimAtproto runs seeds on an atproto chain (format.go: P-256 chain key, DAG-CBOR
// records, clocks that start up to two minutes apart, the repository checks at the
// end): seeds 1 to 6 of their default profiles (mixed; seed 5 clocks, whose wall
// clocks jump by minutes to days) must find nothing. Under -race, one short seed in
// this process.
func TestSimAtproto(t *testing.T) {
	if raceEnabled {
		res := Run(t, Config{Seed: 5, Format: FormatAtproto, Duration: 3 * time.Second})
		if !res.OK() {
			t.Fatalf("%s\n%s", res.Summary(), res.Report())
		}
		t.Log(res.Summary())
		return
	}
	n := 6
	if testing.Short() {
		n = 3
	}
	o := SearchOptions{Base: Config{Format: FormatAtproto}, First: 1, Seeds: n, Parallel: 1}
	sum := searchInWorkers(context.Background(), o)
	t.Logf("%s", sum)
	if sum.Seeds != n {
		t.Errorf("%d of %d seeds ran", sum.Seeds, n)
	}
	for _, seed := range sortedSeeds(sum.Results) {
		if r := sum.Results[seed]; r.Commits == 0 || r.Config.Format != FormatAtproto {
			t.Errorf("seed %d: %d commits, format %q", seed, r.Commits, r.Config.Format)
		}
	}
	reportFailures(t, sum, nil)
}

// TestFindsUnboundedRev: on an atproto chain, revs taken from the holder's clock
// without signer.MaxRevAhead's bound (knob unbounded-rev) follow a clock that jumped
// forward, and the run's relay check refuses them (future_rev); with the bound, the
// same seeds find nothing of the kind.
func TestFindsUnboundedRev(t *testing.T) {
	c := bugCase{profile: "clocks", format: FormatAtproto, knobs: Knobs{UnboundedRev: true}, first: 1, seeds: 2,
		kinds: []string{VFutureRev}}
	findsBug(t, c)
	c.knobs = Knobs{}
	findsNoBug(t, c)
}

// TestFindsOwnRevClock: issue 22's future_rev. In the sweep of 6c76d46 the first Raft
// leader (which writes the genesis and so starts log time) was minutes fast, and a
// holder as fast signed revs past a relay's 5 minutes: the rev came from the holder's
// own clock, bounded only by log time + signer.MaxRevAhead. Seeds 840095, 840195 and
// 840235 of the default mix (all flapping, clocks up to 10 minutes apart) replay it
// with the knob own-rev-clock (4 of 4 replays each); with the rev taken from the
// cluster's clock (signer/node/peerclock.go) none of them does.
func TestFindsOwnRevClock(t *testing.T) {
	for _, seed := range []int64{840195, 840235} {
		c := bugCase{format: FormatAtproto, knobs: Knobs{OwnRevClock: true}, first: seed, seeds: 1, kinds: []string{VFutureRev}}
		findsBug(t, c)
		c.knobs = Knobs{}
		findsNoBug(t, c)
	}
}

func TestConfigFormat(t *testing.T) {
	c := Config{Seed: 3, Format: FormatAtproto}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := c.ReplayCommand(); !strings.Contains(got, "-format atproto") || !strings.Contains(got, "--format atproto") {
		t.Errorf("replay command %q does not name the format", got)
	}
	c = Config{Seed: 3, Format: "plc"}
	if err := c.setDefaults(); err == nil {
		t.Error("format plc accepted")
	}
}

// The atproto recorder's rules on their own: two different repository commits
// proposed for one (seq, epoch) are an equivocation (the same one proposed again is
// not), and a proposed commit the recording key never signed is unknown_commit.
func TestAtprotoSignatureRules(t *testing.T) {
	cfg := Config{Seed: 1, Format: FormatAtproto, Dir: t.TempDir()}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	w, err := newWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(w.dir)
	key := w.devs[0].key // records what it signs
	propose := func(k chain.Key, id, rev string) []byte {
		t.Helper()
		in := w.intentOf(id)
		raw, err := atproto.Propose(k, atproto.MemBlocks{}, atproto.Head{}, chain.Commit{Chain: key.DID(), Seq: 1, Epoch: 1,
			Signer: w.ids[0], Ops: []chain.Op{{ID: in.ID, Kind: chain.Put, Path: in.Path, Value: in.Value}}}, key.DID(), rev)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	kinds := func() map[string]int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return copyMap(w.vcount)
	}
	a := propose(key, "a", "3lbbbbbbbbb22")
	w.sigs.proposed(0, a)
	w.sigs.proposed(0, a) // proposed again (an unknown outcome): the same commit
	if k := kinds(); len(k) != 0 {
		t.Fatalf("one commit proposed twice: %v", k)
	}
	if !w.sigs.markApplied(a) {
		t.Fatal("an applied commit the key signed is not known")
	}
	w.sigs.proposed(1, propose(key, "b", "3lbbbbbbbbc22"))
	if k := kinds(); k[VEquivocate] != 1 {
		t.Fatalf("two commits for seq 1 epoch 1: %v", k)
	}
	w.sigs.proposed(1, propose(w.key, "c", "3lbbbbbbbbd22")) // the bare key: not recorded
	if k := kinds(); k[VUnsigned] != 1 {
		t.Fatalf("a commit the recording key never signed: %v", k)
	}
}
