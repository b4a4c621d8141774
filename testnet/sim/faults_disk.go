package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/batonhq/baton/intentlog"
)

// Disk faults (issue 20 item 6): a device crashes, and its disk hands back something
// else than was written: a flipped bit in one field of a raft.db entry (its term,
// type, a command's data, a configuration's voter flag), in Raft's stable
// store (the current term, the vote), anywhere in state.db, or a torn raft.db (its
// tail cut, or a sector zeroed, as a write interrupted by the crash leaves it). The
// device then starts again on that disk.
//
// Invariant (VCorruptStore): a device whose raft.db holds a flipped field Raft trusts
// never starts (it would vote and serve on it: issue 20 item 1). Its start is refused
// with intentlog.ErrCorrupt; at the heal the operator follows the alarm: the device
// leaves the configuration (it must not count toward a quorum while it has no log;
// when there is no leader to remove it, the disk is "replaced": the bytes it held are
// put back and it starts again), is repaired (baton repair; when its stable store itself is damaged it cannot be,
// and it joins again as a new member: a fresh raft.db), starts and joins again. The
// other invariants (no fork, nothing acknowledged lost) hold as ever. A flip in
// state.db or a torn page may hit nothing that is read (a free page): no verdict of
// its own, the other invariants judge.
//
// With the knob unsealed-raft (the code before the seals) the simulator finds item 1:
// the device starts on its flipped term (VCorruptStore), and can win an election and
// truncate committed entries elsewhere (VFork, VLost).

// FDisk is the disk fault kind.
const FDisk = "disk"

// VCorruptStore: a device started on a raft.db with a flipped field Raft trusts.
const VCorruptStore = "corrupt_store"

// diskDamages are the damages a disk fault draws from (action.Damage).
var diskDamages = []string{"term", "type", "voter", "data", "stable-term", "stable-vote", "state", "torn"}

func diskDamage(rng *rand.Rand) string { return diskDamages[rng.IntN(len(diskDamages))] }

// trustedField reports whether damage flips a field of raft.db that Raft trusts, so
// that a start on it is a violation.
func trustedField(damage string) bool {
	switch damage {
	case "term", "type", "voter", "data", "stable-term", "stable-vote":
		return true
	}
	return false
}

func init() {
	// disk: disk faults among crashes, partitions and leadership changes (what it
	// takes for a device with a "greater" last term to be asked for its vote).
	profiles["disk"] = Profile{Name: "disk", FaultEvery: 700 * time.Millisecond,
		Weights: map[string]int{FDisk: 4, FCrash: 2, FPowerCut: 1, FPartition: 2, FLeadership: 2, FTransfer: 1,
			FDelay: 1, FPause: 1},
		Clients: 4, Think: 50 * time.Millisecond,
		Timeout: [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, WaitSigned: 0.3}
}

// injectDisk crashes dev, damages its data dir and starts it again.
func (w *world) injectDisk(a action, dev int) (bool, string) {
	d := w.devs[dev]
	if d.isRemoved() || w.voters() < 3 || w.diskDown() {
		return false, ""
	}
	// One device at a time down from its disk, as an operator works: not while
	// another is (faults_repair.go), nor while another that lost its log has not
	// caught up (seed 340098: a disk fault on a second and a third device within
	// 3 s of a first one's repair left no majority holding the history). The slot
	// is held until this device is started again or marked diskBad (diskDown).
	if n, _ := d.node(); n == nil || d.paused() || w.othersCatchingUp(dev) || !w.takeRepairSlot(dev) {
		return false, ""
	}
	defer func() {
		w.mu.Lock()
		w.repairDown = 0
		w.mu.Unlock()
	}()
	if !d.crash(false, "", 0) {
		return false, ""
	}
	raftPath := filepath.Join(d.dir, intentlog.RaftFile)
	orig := raftPath + ".sim-orig" // what the disk held: put back when the device cannot be removed
	if err := copyFile(raftPath, orig); err != nil {
		w.setUndo(a.ID, func() { w.restart(d) })
		return true, fmt.Sprintf("disk dev%d: copy raft.db: %v: a crash", dev, err)
	}
	defer os.Remove(orig)
	what, err := damageDisk(d.dir, a.Damage, rngFor(a))
	if err != nil { // nothing of that kind to damage: the fault is a crash
		w.setUndo(a.ID, func() { w.restart(d) })
		return true, fmt.Sprintf("disk dev%d: no %s to damage (%v): a crash", dev, a.Damage, err)
	}
	err = d.start()
	switch {
	case err == nil && trustedField(a.Damage):
		w.violation(VCorruptStore, dev, "dev%d started on a raft.db with %s: it can vote and serve on it", dev, what)
		return true, fmt.Sprintf("disk dev%d: %s; started", dev, what)
	case err == nil:
		return true, fmt.Sprintf("disk dev%d: %s; started (nothing read was damaged, or it was set aside)", dev, what)
	case !errors.Is(err, intentlog.ErrCorrupt):
		w.violation(VPanic, dev, "start after a disk fault (%s): %v", what, err)
		return true, ""
	}
	// The alarm asks the operator to take the device out of the configuration
	// first (repaired, it has no log: it must not count toward a quorum), then to
	// repair it. Marked removed first: a change whose future fails may still commit,
	// and the re-join checks the configuration itself.
	d.mu.Lock()
	d.removed, d.diskBad = true, true
	d.mu.Unlock()
	rerr := w.membership(func(r *raft.Raft) raft.Future {
		return r.RemoveServer(raft.ServerID(d.id), 0, w.cfg.TTL)
	})
	if rerr != nil {
		// No leader to remove it: repairing it now would let it vote without a log
		// (issue 20 item 2, not this fault's finding). The disk is replaced instead
		// (the bytes it held put back) and the device starts again.
		d.mu.Lock()
		d.diskBad = false
		d.mu.Unlock()
		// Written back in place, as an operator's cp does: the same inode the refused
		// start had locked (a start refused inside bbolt.Open once kept that lock and
		// the next start waited for ever; docs/DRILLS.md, seed 680274).
		if cerr := copyFile(orig, raftPath); cerr != nil {
			w.violation(VPanic, dev, "put raft.db back: %v", cerr)
		}
		w.restart(d)
		w.setUndo(a.ID, func() { w.rejoin(d) })
		return true, fmt.Sprintf("disk dev%d: %s; start refused; removal failed (%v): raft.db put back", dev, what, rerr)
	}
	w.setUndo(a.ID, func() { w.repairDisk(d) })
	return true, fmt.Sprintf("disk dev%d: %s; start refused; removed from the configuration: %v", dev, what, err)
}

// diskDownLocked is diskDown for a caller holding w.mu (devices' own locks are
// taken inside, never the other way round).
func (w *world) diskDownLocked() bool { return w.diskDown() }

// diskDown reports whether a device is down after a disk fault (one at a time: the
// rest of the faults need a quorum).
func (w *world) diskDown() bool {
	for _, d := range w.devs {
		d.mu.Lock()
		bad := d.diskBad
		d.mu.Unlock()
		if bad {
			return true
		}
	}
	return false
}

// repairDisk finishes what the alarm asks (the device was removed when its start was
// refused): repair, start, join again.
func (w *world) repairDisk(d *device) {
	if rerr := intentlog.Repair(d.dir); rerr != nil {
		// The stable store itself is damaged: join again as a new member.
		w.ev.add(d.idx, "repair", "%v: a fresh raft.db", rerr)
		if ferr := freshRaftFile(d.dir); ferr != nil {
			w.violation(VPanic, d.idx, "fresh raft.db: %v", ferr)
			return
		}
	}
	w.ev.add(d.idx, "repair", "repaired")
	w.markUnsynced(d.idx)
	d.mu.Lock()
	d.diskBad, d.joins = false, true
	d.mu.Unlock()
	w.restart(d)
	w.rejoin(d)
}

// freshRaftFile empties dir's Raft log and state as a new member's: term 1, no vote,
// no log (state.db and the snapshots gone). A Raft state exists, so the node does not
// bootstrap a cluster of its own; the leader sends it everything.
func freshRaftFile(dir string) error {
	for _, name := range []string{intentlog.RaftFile, intentlog.StateFile, intentlog.CleanFile, "snapshots"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, intentlog.RaftFile)})
	if err != nil {
		return err
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		s.Close()
		return err
	}
	return s.Close()
}

// damageDisk applies damage to the data dir of a stopped device and says what it did.
// raft.db's entries and stable values are rewritten through raft-boltdb as stored
// (a seal, if any, kept as it was): the bit flipped in that field.
func damageDisk(dir, damage string, rng *rand.Rand) (string, error) {
	switch damage {
	case "state":
		return flipFileBit(filepath.Join(dir, intentlog.StateFile), rng)
	case "torn":
		return tearFile(filepath.Join(dir, intentlog.RaftFile), rng)
	}
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, intentlog.RaftFile)})
	if err != nil {
		return "", err
	}
	defer s.Close()
	switch damage {
	case "stable-term", "stable-vote":
		key := "CurrentTerm"
		if damage == "stable-vote" {
			key = "LastVoteTerm"
		}
		v, err := s.Get([]byte(key))
		if err != nil || len(v) < 8 {
			return "", fmt.Errorf("stable %s: %v (%d bytes)", key, err, len(v))
		}
		old := raftboltdbU64(v)
		v = append([]byte(nil), v...)
		v[7] ^= 1 << rng.IntN(7)
		if err := s.Set([]byte(key), v); err != nil {
			return "", err
		}
		return fmt.Sprintf("stable %s %d -> %d", key, old, raftboltdbU64(v)), nil
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if last == 0 {
		return "", errors.New("an empty log")
	}
	want := func(l *raft.Log) bool { return true }
	switch damage {
	case "voter":
		want = func(l *raft.Log) bool { return l.Type == raft.LogConfiguration }
	case "data":
		want = func(l *raft.Log) bool { return l.Type == raft.LogCommand && len(l.Data) > 0 }
	}
	var l raft.Log
	i := last
	for ; i >= first && i > 0; i-- {
		l = raft.Log{}
		if s.GetLog(i, &l) == nil && want(&l) {
			break
		}
	}
	if i < first || i == 0 {
		return "", fmt.Errorf("no entry for %s in %d..%d", damage, first, last)
	}
	var what string
	switch damage {
	case "term":
		old := l.Term
		l.Term ^= 1 << rng.IntN(7)
		what = fmt.Sprintf("entry %d term %d -> %d (last index %d)", i, old, l.Term, last)
	case "type":
		old := l.Type
		l.Type ^= 1
		what = fmt.Sprintf("entry %d type %v -> %v", i, old, l.Type)
	case "data":
		l.Data = append([]byte(nil), l.Data...)
		j := rng.IntN(len(l.Data))
		l.Data[j] ^= 1 << rng.IntN(8)
		what = fmt.Sprintf("entry %d data byte %d", i, j)
	case "voter":
		c := raft.DecodeConfiguration(l.Data)
		j := rng.IntN(len(c.Servers))
		c.Servers[j].Suffrage ^= 1 // Voter <-> Nonvoter
		l.Data = raft.EncodeConfiguration(c)
		what = fmt.Sprintf("entry %d configuration: %s suffrage -> %v", i, c.Servers[j].ID, c.Servers[j].Suffrage)
	default:
		return "", fmt.Errorf("unknown damage %q", damage)
	}
	raw := l
	return what, s.StoreLog(&raw)
}

func raftboltdbU64(v []byte) uint64 {
	var x uint64
	for _, b := range v[:8] {
		x = x<<8 | uint64(b)
	}
	return x
}

// flipFileBit flips one bit of the file at path, past bbolt's two meta pages.
func flipFileBit(path string, rng *rand.Rand) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	ps := os.Getpagesize()
	if len(b) <= 2*ps {
		return "", errors.New("nothing past the meta pages")
	}
	j := 2*ps + rng.IntN(len(b)-2*ps)
	b[j] ^= 1 << rng.IntN(8)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s bit flipped at byte %d of %d", filepath.Base(path), j, len(b)), nil
}

// tearFile leaves raft.db as a write interrupted by the crash can: its tail cut, or a
// sector of its last pages zeroed.
func tearFile(path string, rng *rand.Rand) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if rng.IntN(2) == 0 {
		size := st.Size()/2 + rng.Int64N(st.Size()/2)
		return fmt.Sprintf("%s cut to %d of %d bytes", filepath.Base(path), size, st.Size()), os.Truncate(path, size)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	ps := os.Getpagesize()
	if len(b) <= 2*ps+512 {
		return "", errors.New("nothing past the meta pages")
	}
	lo := max(2*ps, len(b)-8*ps)
	j := lo + rng.IntN(len(b)-lo-512)
	j -= j % 512
	clear(b[j : j+512])
	return fmt.Sprintf("%s sector at %d of %d zeroed", filepath.Base(path), j, len(b)), os.WriteFile(path, b, 0o600)
}
