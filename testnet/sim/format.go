package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/chain/atproto/indigocheck"
)

// Runs on an atproto chain (Config.Format "atproto", `baton sim --format atproto`):
// the chain key is P-256, so the founder's genesis declares the atproto format and
// the holders sign atproto commits (one in flight) on the repository every replica
// keeps. What the mode changes:
//
//   - the load writes DAG-CBOR records, one new record per intent
//     (app.baton.sim/<id>); the odd clients (inputs.go) do not run (their valid
//     inputs are not records);
//   - every device's wall clock starts up to maxSkew away from the others' (and the
//     clock faults of the profile step and jump them as in any run): revs come from
//     the holders' clocks;
//   - the chain is checked through its format (chain.NewStepper: the repository is
//     replayed, revs strictly increase, prevData and MST roots link), and no two
//     applied commits share a rev or (among those that changed the repository) a
//     prevData (atproto.Links): both VFork;
//   - the recording key sees only a repository commit's unsigned bytes (no seq or
//     epoch): the envelope that carries it is matched when it is proposed, and two
//     different repository commits proposed for one (seq, epoch) are VEquivocate;
//   - at the end, on a converged cluster (VRepo): indigo accepts the whole chain
//     (indigocheck.Chain: every commit's #commit event, the relay's rev, future-rev
//     and prevData checks, the repository's CAR, with the run's true time as the
//     relay's clock), every replica's repository head (MST root, commit, rev) is the
//     replayed one, and the repository's records are the applied intents' records,
//     byte for byte, as their clients submitted them.

// FormatAtproto is Config.Format's value for an atproto chain.
const FormatAtproto = "atproto"

// VRepo: on an atproto chain, indigo refuses the converged chain, a replica's
// repository differs from the replayed one, or a record differs from its intent's.
const VRepo = "atproto_repo"

// VFutureRev: on an atproto chain, a commit's rev is more than
// indigocheck.MaxFuture past the run's true time at the end (a relay refuses it) though
// fewer than a majority of the devices' clocks ran fast when it was signed
// (checkFutureRevs).
const VFutureRev = "future_rev"

// maxSkew bounds the wall clock offsets an atproto run's devices start with, unless
// its profile sets Profile.ClockSkew.
const maxSkew = 2 * time.Minute

func init() {
	// atproto-skew: the clocks profile with clocks that start up to 4 minutes apart.
	// A first Raft leader minutes fast writes the genesis, which starts log time
	// there; a holder as fast signed revs past a relay's 5 minutes while the rev came
	// from its own clock (future_rev: seed 5 of seeds 1-11 with --format atproto, rev
	// 5m17s ahead). The rev now comes from the cluster clock (signer/node/peerclock.go;
	// docs/DRILLS.md).
	p := profiles["clocks"]
	p.Name, p.ClockSkew = "atproto-skew", 4*time.Minute
	profiles[p.Name] = p
}

func checkFormat(f string) error {
	switch f {
	case "", "baton", FormatAtproto:
		return nil
	}
	return fmt.Errorf("sim: unknown format %q (have baton, atproto)", f)
}

func (c Config) atproto() bool { return c.Format == FormatAtproto }

// chainKey is the run's chain key: always the same (only the schedule depends on the
// seed), Ed25519 or, on an atproto run, P-256.
func chainKey(cfg Config) (chain.Key, error) {
	seed := bytes.Repeat([]byte{0xba}, 32)
	if cfg.atproto() {
		return atproto.ParseKey(seed)
	}
	return chain.NewEd25519KeyFromSeed(seed)
}

// format is the chain's commit format.
func (w *world) format() chain.Format {
	if w.cfg.atproto() {
		return atproto.Atproto
	}
	return chain.Baton
}

// skewClocks steps each device's wall clock by an offset drawn from the seed, within
// the profile's ClockSkew (on an atproto run, maxSkew if unset) either way, before it
// first starts.
func (w *world) skewClocks() {
	skew := w.prof.ClockSkew
	if skew == 0 && w.cfg.atproto() {
		skew = maxSkew
	}
	if skew <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), 0x5ce3))
	for _, d := range w.devs {
		by := time.Duration(rng.Int64N(int64(2*skew))) - skew
		by = d.step(by.Round(time.Millisecond))
		w.ev.add(d.idx, "clock", "starts %v off", by)
	}
}

// intentOf is the intent a client submits under id: a put of a record of its own.
func (w *world) intentOf(id string) intentlog.Intent {
	if !w.cfg.atproto() {
		return intentOf(id)
	}
	return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.baton.sim/" + id, Value: atRecord(id)}
}

var recordEnc = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// atRecord is the DAG-CBOR record of intent id.
func atRecord(id string) []byte {
	b, err := recordEnc.Marshal(map[string]any{"$type": "app.baton.sim", "id": id})
	if err != nil {
		panic(err)
	}
	return b
}

// recordRepoCommit records one signature of a repository commit's unsigned bytes (its
// seq and epoch are learnt when the envelope carrying it is proposed).
func (s *signatures) recordRepoCommit(dev int, msg []byte) {
	var f struct {
		DID string `cbor:"did"`
		Rev string `cbor:"rev"`
	}
	if err := cbor.Unmarshal(msg, &f); err != nil || f.Rev == "" {
		s.w.violation(VEquivocate, dev, "the chain key signed bytes that are not a repository commit: %v", err)
		return
	}
	sc := signedCommit{dev: dev, digest: sha256.Sum256(msg), at: s.w.ev.now(), rev: f.Rev, fast: s.w.fastClocks()}
	s.w.ev.add(dev, "sign", "rev=%s %s", f.Rev, short(sc.digest[:]))
	s.mu.Lock()
	if _, ok := s.all[sc.digest]; !ok {
		s.all[sc.digest] = sc
	}
	s.mu.Unlock()
}

// fastClock is how far ahead of the true time a device's clock must run to count as
// fast for future_rev: a relay's 5 minutes less a minute (how long a measured clock
// counts in the cluster clock; the simulator's probes are a TTL apart).
const fastClock = indigocheck.MaxFuture - time.Minute

// fastClocks counts the devices whose wall clocks run more than fastClock ahead of the
// true time (the bubble's clock).
func (w *world) fastClocks() int {
	n := 0
	for _, d := range w.devs {
		if d.clock.Now().Sub(time.Now()) > fastClock {
			n++
		}
	}
	return n
}

// checkFutureRevs has a relay whose clock is the run's true time (the devices' clocks
// are off it) check every commit's rev (indigocheck.FutureRev): future_rev for the
// first one it refuses, unless a majority of the devices' clocks ran fast when it was
// signed. The rev follows the earliest clock of a majority of the voters (the cluster
// clock, signer/node/peerclock.go): when every device of some majority is fast, no
// device can tell, and a relay refusing the rev is the clocks' fault, noted, not a
// violation.
func (w *world) checkFutureRevs(raws [][]byte) {
	quorum := len(w.devs)/2 + 1
	for i, raw := range raws {
		e, d, ok := repoDigest(raw)
		if !ok {
			continue // indigocheck refuses it
		}
		err := indigocheck.FutureRev(e.Repo.Rev, time.Now())
		if err == nil {
			continue
		}
		w.sigs.mu.Lock()
		sc, known := w.sigs.all[d]
		w.sigs.mu.Unlock()
		if known && sc.fast >= quorum {
			w.ev.add(-1, "note", "seq %d: %v; %d of %d devices' clocks were more than %v fast when it was signed", i+1, err, sc.fast, len(w.devs), fastClock)
			continue
		}
		w.violation(VFutureRev, -1, "a relay refuses the chain: seq %d: %v (%d of %d devices' clocks more than %v fast when it was signed)",
			i+1, err, sc.fast, len(w.devs), fastClock)
		return
	}
}

// repoDigest is the digest of the repository commit an envelope carries, as the
// recording key saw it signed.
func repoDigest(raw []byte) (atproto.Envelope, [32]byte, bool) {
	e, err := atproto.DecodeEnvelope(raw)
	if err != nil {
		return e, [32]byte{}, false
	}
	msg, err := e.Repo.UnsignedBytes()
	if err != nil {
		return e, [32]byte{}, false
	}
	return e, sha256.Sum256(msg), true
}

// proposed checks an atproto envelope a device proposes: its repository commit was
// signed by the recording key, and no other one was proposed for its (seq, epoch).
func (s *signatures) proposed(dev int, raw []byte) {
	e, d, ok := repoDigest(raw)
	if !ok {
		return // the apply refuses it; the chain's checks see what is applied
	}
	c := e.Commit
	s.mu.Lock()
	sc, signed := s.all[d]
	if signed {
		sc.seq, sc.epoch, sc.ops = c.Seq, c.Epoch, len(c.Ops)
		s.all[d] = sc
	}
	slot := [2]uint64{c.Seq, c.Epoch}
	first, seen := s.bySlot[slot]
	if signed && !seen {
		s.bySlot[slot] = sc
	}
	s.mu.Unlock()
	if !signed {
		s.w.violation(VUnsigned, dev, "dev%d proposed commit seq %d epoch %d whose repository commit the recording key never signed", dev, c.Seq, c.Epoch)
		return
	}
	if seen && first.digest != d {
		s.w.violation(VEquivocate, dev, "two different repository commits for seq %d epoch %d: %s (dev%d at %.3fs) and %s (dev%d, rev %s)",
			c.Seq, c.Epoch, short(first.digest[:]), first.dev, first.at.Seconds(), short(d[:]), dev, e.Repo.Rev)
	}
}

// checkRepos runs the end-of-run checks of an atproto chain on a converged cluster
// (see the comment at the top of the file).
func (w *world) checkRepos() {
	var raws [][]byte
	type replica struct {
		dev  int
		head atproto.Head
	}
	var reps []replica
	for _, d := range w.devs {
		n, _ := d.node()
		if n == nil {
			continue
		}
		lg := n.Log()
		if raws == nil {
			for s := uint64(1); s <= lg.View().Head.Seq; s++ {
				raw, err := lg.Commit(s)
				if err != nil {
					w.violation(VRepo, d.idx, "read commit seq %d: %v", s, err)
					return
				}
				raws = append(raws, raw)
			}
		}
		var h atproto.Head
		err := lg.ReadFormat(func(st intentlog.FormatStore) error {
			var err error
			h, err = atproto.DecodeHead(st.Head())
			return err
		})
		if err != nil {
			w.violation(VRepo, d.idx, "read the repository head: %v", err)
			return
		}
		reps = append(reps, replica{d.idx, h})
	}
	if len(raws) == 0 {
		return
	}
	w.checkFutureRevs(raws)
	// The other checks, with a relay whose clock takes any rev.
	res, err := indigocheck.Chain(context.Background(), raws, w.key.DID(), time.Now().Add(100*365*24*time.Hour))
	if err != nil {
		w.violation(VRepo, -1, "indigo refuses the chain: %v", err)
		return
	}
	for _, r := range reps {
		if !bytes.Equal(r.head.Data, res.Head.Data) || !bytes.Equal(r.head.Commit, res.Head.Commit) || r.head.Rev != res.Head.Rev {
			w.violation(VRepo, r.dev, "dev%d's repository (root %s, rev %s) is not the replayed chain's (root %s, rev %s)",
				r.dev, short(r.head.Data), r.head.Rev, short(res.Head.Data), res.Head.Rev)
		}
	}
	// The records are the applied intents', as their clients submitted them.
	want := map[string][]byte{}
	var bad []string
	for _, raw := range raws {
		c, err := signer.DecodeCommit(raw)
		if err != nil {
			continue // indigocheck refused it above
		}
		for _, op := range c.Ops {
			in := w.intentOf(op.ID)
			if op.Kind != chain.Put || op.Path != in.Path || !bytes.Equal(op.Value, in.Value) {
				bad = append(bad, fmt.Sprintf("seq %d: intent %s is not the one submitted", c.Seq, op.ID))
				continue
			}
			want[op.Path] = op.Value
		}
	}
	for p, v := range want {
		if !bytes.Equal(res.Records[p], v) {
			bad = append(bad, fmt.Sprintf("record %s differs from its intent's", p))
		}
	}
	for p := range res.Records {
		if _, ok := want[p]; !ok {
			bad = append(bad, fmt.Sprintf("record %s was never submitted", p))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		if len(bad) > 10 {
			bad = append(bad[:10], fmt.Sprintf("... (%d in all)", len(bad)))
		}
		w.violation(VRepo, -1, "the repository is not the intents applied: %s", strings.Join(bad, "; "))
	}
	w.ev.add(-1, "atproto", "indigo accepts %d commits, %d records, rev %s; %d replicas agree", res.Commits, len(res.Records), res.Head.Rev, len(reps))
}
