package testnet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// chainBuilder signs a real chain with a real ed25519 key.
type chainBuilder struct {
	t    *testing.T
	key  *chain.Ed25519Key
	raws [][]byte
	next int
}

func newChainBuilder(t *testing.T) *chainBuilder {
	t.Helper()
	seed := make([]byte, 32)
	seed[0] = 7
	k, err := chain.NewEd25519KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return &chainBuilder{t: t, key: k}
}

// commit signs the next commit on prev (the last raw if prev is nil and the chain is
// not empty) with n fresh intents, or the given ids.
func (b *chainBuilder) sign(seq uint64, prev []byte, epoch uint64, signerID string, at time.Time, ids ...string) []byte {
	b.t.Helper()
	var ops []chain.Op
	for _, id := range ids {
		ops = append(ops, chain.Op{ID: id, Kind: chain.Put, Path: "app/" + id, Value: []byte("v")})
	}
	raw, err := chain.Sign(b.key, chain.Commit{Seq: seq, Prev: prev, Epoch: epoch, Signer: signerID, Ops: ops, Time: at.UnixMilli()})
	if err != nil {
		b.t.Fatal(err)
	}
	return raw
}

func (b *chainBuilder) append(epoch uint64, signerID string, at time.Time, ids ...string) []byte {
	var prev []byte
	if len(b.raws) > 0 {
		h := chain.Hash(b.raws[len(b.raws)-1])
		prev = h[:]
	}
	raw := b.sign(uint64(len(b.raws)+1), prev, epoch, signerID, at, ids...)
	b.raws = append(b.raws, raw)
	return raw
}

func (b *chainBuilder) copyRaws() [][]byte { return append([][]byte(nil), b.raws...) }

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

// cleanChain: 6 commits, epochs 1,1,1,2,2,3 over two failovers, intents i0..i11.
func cleanChain(t *testing.T) (*chainBuilder, []Ack) {
	b := newChainBuilder(t)
	var acks []Ack
	id := 0
	for i, ep := range []uint64{1, 1, 1, 2, 2, 3} {
		signerID := fmt.Sprintf("peer%d", ep)
		ids := []string{fmt.Sprintf("i%d", id), fmt.Sprintf("i%d", id+1)}
		acks = append(acks, Ack{ID: ids[0], At: t0}, Ack{ID: ids[1], At: t0})
		id += 2
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if i == 3 {
			at = at.Add(1500 * time.Millisecond) // the first failover takes 1.6 s
		}
		if i == 5 {
			at = at.Add(2 * time.Second)
		}
		b.append(ep, signerID, at, ids...)
	}
	return b, acks
}

func kinds(r CheckResult) string {
	var ks []string
	for _, f := range r.Findings {
		ks = append(ks, f.Kind)
	}
	return strings.Join(ks, ",")
}

func TestCheckCleanChainPasses(t *testing.T) {
	b, acks := cleanChain(t)
	in := CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{
		{Device: "d0", Commits: b.copyRaws()}, {Device: "d1", Commits: b.copyRaws()}, {Device: "d2", Commits: b.copyRaws()[:4]},
	}}
	r := Check(in)
	if !r.OK() {
		t.Fatalf("clean chain: findings %v", r.Findings)
	}
	if r.Commits != 6 || r.Intents != 12 || r.Acked != 12 {
		t.Fatalf("counts: commits %d intents %d acked %d", r.Commits, r.Intents, r.Acked)
	}
	if r.Heads["d2"] != 4 || r.Heads["d0"] != 6 {
		t.Fatalf("heads %v", r.Heads)
	}
	if len(r.Failovers) != 2 {
		t.Fatalf("failovers %+v", r.Failovers)
	}
	f := r.Failovers[0]
	if f.FromEpoch != 1 || f.ToEpoch != 2 || f.LastSeq != 3 || f.FirstSeq != 4 || f.Duration != 1600*time.Millisecond || f.Source != "commit_time" {
		t.Fatalf("failover 0: %+v", f)
	}
	// Observed times win over the commits' own clocks.
	in.Observed = map[uint64]time.Time{5: t0, 6: t0.Add(700 * time.Millisecond)}
	r = Check(in)
	if f := r.Failovers[1]; f.Duration != 700*time.Millisecond || f.Source != "observed" {
		t.Fatalf("observed failover: %+v", f)
	}
}

func TestCheckCatchesFork(t *testing.T) {
	b, acks := cleanChain(t)
	// d1 signs a different seq 4 on the same seq 3 (a second holder on epoch 2).
	h3 := chain.Hash(b.raws[2])
	forked := b.sign(4, h3[:], 2, "peerX", t0, "i6", "i7")
	d1 := append(b.copyRaws()[:3], forked)
	// A device whose applied chain holds two commits on one prev (not a valid chain).
	d2 := append(b.copyRaws()[:4], forked)
	r := Check(CheckInput{Chain: b.key.DID(), Acked: acks[:8], Devices: []DeviceChain{
		{Device: "d0", Commits: b.copyRaws()}, {Device: "d1", Commits: d1}, {Device: "d2", Commits: d2},
	}})
	if r.OK() || r.Forks < 2 {
		t.Fatalf("fork not caught: %s %v", kinds(r), r.Findings)
	}
	var sawFork, sawDiv bool
	for _, f := range r.Findings {
		switch f.Kind {
		case FindingFork:
			sawFork = f.Device == "d2" && f.Seq == 4
		case FindingDivergence:
			sawDiv = sawDiv || (f.Device == "d1" && f.Seq == 4)
		}
	}
	if !sawFork || !sawDiv {
		t.Fatalf("want fork on d2 seq 4 and divergence on d1 seq 4: %v", r.Findings)
	}
}

func TestCheckCatchesLostIntent(t *testing.T) {
	b, acks := cleanChain(t)
	acks = append(acks, Ack{ID: "never-signed", At: t0, Device: "d1", Index: 42})
	r := Check(CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}}})
	if r.Lost != 1 || len(r.Findings) != 1 || r.Findings[0].Kind != FindingLost || r.Findings[0].ID != "never-signed" {
		t.Fatalf("lost intent not caught: %v", r.Findings)
	}
}

func TestCheckCatchesDuplicate(t *testing.T) {
	b, acks := cleanChain(t)
	b.append(3, "peer3", t0.Add(5*time.Second), "i2") // i2 was signed at seq 2 already
	r := Check(CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}}})
	if r.Dupes != 1 || len(r.Findings) != 1 || r.Findings[0].ID != "i2" || r.Findings[0].Seq != 7 {
		t.Fatalf("duplicate not caught: %v", r.Findings)
	}
}

func TestCheckCatchesBadSignature(t *testing.T) {
	b, acks := cleanChain(t)
	raws := b.copyRaws()
	c, err := chain.Decode(raws[4])
	if err != nil {
		t.Fatal(err)
	}
	c.Sig[0] ^= 0xff
	bad, err := chain.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	raws[4] = bad
	r := Check(CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: raws}}})
	if r.Invalid != 1 || r.OK() {
		t.Fatalf("bad signature not caught: %v", r.Findings)
	}
	if f := r.Findings[0]; f.Kind != FindingInvalid || f.Seq != 5 || !strings.Contains(f.Detail, "signature") {
		t.Fatalf("finding %+v", f)
	}
	// A chain signed by another key fails too.
	r = Check(CheckInput{Chain: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}}})
	if r.Invalid != 1 {
		t.Fatalf("wrong chain key not caught: %v", r.Findings)
	}
}

// signaturesOf books raws as signed commits found in one device's Raft log.
func signaturesOf(t *testing.T, did string, raws ...[]byte) *Signatures {
	t.Helper()
	b := newSigBook()
	for i, raw := range raws {
		b.add("d0", intentlog.RaftEntry{Index: uint64(i + 1), AppendedAt: t0, Entry: intentlog.CommitEntry{Raw: raw}}, did)
	}
	s := b.signatures()
	return &s
}

func TestCheckCatchesEquivocation(t *testing.T) {
	b, acks := cleanChain(t)
	// A second commit for seq 4 in epoch 2, signed but refused by the apply.
	h3 := chain.Hash(b.raws[2])
	other := b.sign(4, h3[:], 2, "peer2", t0, "i6")
	in := CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}},
		Signatures: signaturesOf(t, b.key.DID(), append(b.copyRaws(), other)...)}
	r := Check(in)
	if r.Equivocations != 1 || r.Refused != 1 || r.Signed != 7 || !r.RaftRead {
		t.Fatalf("equivocation not caught: equivocations %d refused %d signed %d: %v", r.Equivocations, r.Refused, r.Signed, r.Findings)
	}
	if len(r.Findings) != 1 || r.Findings[0].Kind != FindingEquivocation || r.Findings[0].Seq != 4 {
		t.Fatalf("findings %v", r.Findings)
	}
	// Fault-free, the refused commit is a finding of its own.
	in.FaultFree = true
	if r := Check(in); kinds(r) != "equivocation,refused_signature" {
		t.Fatalf("fault-free findings: %s", kinds(r))
	}
}

func TestCheckRefusedWithoutEquivocation(t *testing.T) {
	b, acks := cleanChain(t)
	// A commit for seq 7 (beyond the head) that was never applied: refused, but no
	// second signature on one (seq, epoch).
	h6 := chain.Hash(b.raws[5])
	late := b.sign(7, h6[:], 2, "peer2", t0, "i12")
	in := CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}},
		Signatures: signaturesOf(t, b.key.DID(), append(b.copyRaws(), late)...), Names: map[string]string{"peer2": "d2 (…peer2)"}}
	r := Check(in)
	if !r.OK() || r.Refused != 1 || r.RefusedBy["d2 (…peer2)"] != 1 || len(r.RefusedList) != 1 {
		t.Fatalf("faulty drill: %v refused %d by %v", r.Findings, r.Refused, r.RefusedBy)
	}
	in.FaultFree = true
	if r := Check(in); r.OK() || r.Findings[0].Kind != FindingRefused {
		t.Fatalf("fault-free: %v", r.Findings)
	}
	// A commit entry that does not verify is a finding whatever the drill.
	bad := append([]byte(nil), late...)
	bad[len(bad)-1] ^= 1
	in = CheckInput{Chain: b.key.DID(), Acked: acks, Devices: []DeviceChain{{Device: "d0", Commits: b.copyRaws()}},
		Signatures: signaturesOf(t, b.key.DID(), append(b.copyRaws(), bad)...)}
	if r := Check(in); r.Unverified != 1 || kinds(r) != FindingUnverified {
		t.Fatalf("unverified: %d %s", r.Unverified, kinds(r))
	}
}

// A commit appended after the chains were read (the signer went on while the drill
// collected) is neither applied nor refused as far as the chains show: late, not a
// finding. Once a read chain covers its Raft index, it is judged as before.
func TestCheckLateSignatureIsNotRefused(t *testing.T) {
	b, acks := cleanChain(t)
	h6 := chain.Hash(b.raws[5])
	late := b.sign(7, h6[:], 1, "peer1", t0, "i12") // Raft index 7 in signaturesOf
	in := CheckInput{Chain: b.key.DID(), Acked: acks, FaultFree: true,
		Devices:    []DeviceChain{{Device: "d0", Commits: b.copyRaws(), Applied: 6}},
		Signatures: signaturesOf(t, b.key.DID(), append(b.copyRaws(), late)...)}
	if r := Check(in); !r.OK() || r.Late != 1 || r.Refused != 0 {
		t.Fatalf("applied 6: findings %v late %d refused %d", r.Findings, r.Late, r.Refused)
	}
	in.Devices[0].Applied = 7
	if r := Check(in); r.OK() || r.Late != 0 || r.Refused != 1 || r.Findings[0].Kind != FindingRefused {
		t.Fatalf("applied 7: findings %v late %d refused %d", r.Findings, r.Late, r.Refused)
	}
}
