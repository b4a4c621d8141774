package testnet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

// Issue 38 item 1 over real processes, as a user restoring a backup would: the
// founder signs seq 1 alone and is copied while stopped (a backup from before anyone
// joined); two devices join and seq 2 is acknowledged on all three; the founder is
// stopped, its data dir put back to the copy (its mark beside the dir survives) and
// run again while the others are up. On d880b4d the restored founder led alone
// (its configuration names only itself) and answered a submit with a second seq 2
// within 8 s. It must catch up instead: one history, nothing acknowledged lost.
func TestProcsRestoredFounderBackupCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	bin := testutil.BatonBinary(t)
	backup := t.TempDir() + "/backup"
	var copied bool
	var pc *ProcCluster
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: 3, Dir: t.TempDir(), SampleEvery: -1,
		BeforeInvite: func(ctx context.Context, inviter, _ *Device) error {
			if copied {
				return nil
			}
			copied = true
			res, err := pc.Client(inviter).Submit(ctx, intentlog.Intent{ID: "alone-1", Op: intentlog.OpPut, Path: "app/one", Value: []byte("1")}, node.WaitSigned)
			if err != nil {
				return err
			}
			if res.Seq != 1 {
				return fmt.Errorf("the founder's first intent is seq %d, want 1", res.Seq)
			}
			if err := pc.Stop(ctx, inviter); err != nil {
				return err
			}
			testutil.CopyTree(t, inviter.Dir, backup)
			if err := pc.Restart(ctx, inviter); err != nil {
				return err
			}
			return pc.until(ctx, inviter, "the founder holds again", func() bool {
				st, ok := pc.stateOf(inviter)
				return ok && st.Lease.HeldByMe
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	if err := pc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ds := pc.Devices()
	h, _, ok := pc.Holder()
	if !ok {
		t.Fatal("no holder")
	}
	res, err := pc.Client(h).Submit(ctx, intentlog.Intent{ID: "three-2", Op: intentlog.OpPut, Path: "app/two", Value: []byte("2")}, node.WaitSigned)
	if err != nil || res.Seq != 2 {
		t.Fatalf("seq 2: %+v %v", res, err)
	}
	acked := res.Hash
	founder := ds[0]
	if err := pc.Stop(ctx, founder); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(founder.Dir); err != nil {
		t.Fatal(err)
	}
	testutil.CopyTree(t, backup, founder.Dir)
	if err := pc.Restart(ctx, founder); err != nil {
		t.Fatal(err)
	}
	c := pc.Client(founder)
	answer := make(chan node.SubmitResult, 1)
	go func() {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		r, err := c.Submit(sctx, intentlog.Intent{ID: "restored-2", Op: intentlog.OpPut, Path: "app/restored", Value: []byte("r")}, node.WaitSigned)
		if err == nil {
			answer <- r
		}
		close(answer)
	}()
	// Longer than the old code took to sign its second seq 2 (8 s).
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range ds {
			if h := seqHash(ctx, pc, d, 2); h != "" && h != acked {
				t.Fatalf("%s applied a second seq 2: %s, acknowledged %s\n%s", d.Label(), h, acked, tailFile(founder.Dir+".log", 20))
			}
		}
		if st, ok := pc.stateOf(founder); ok && st.Rejoin != nil && st.Lease.HeldByMe {
			t.Fatal("the fenced founder holds the lease")
		}
		time.Sleep(50 * time.Millisecond) // a poll of the devices' state, not a synchronisation
	}
	if r, ok := <-answer; ok && r.Seq == 2 && r.Hash != acked {
		t.Fatalf("the restored founder answered a second seq 2: %+v", r)
	}
	if err := pc.until(ctx, founder, "the restored founder caught up", func() bool {
		st, ok := pc.stateOf(founder)
		return ok && st.Rejoin == nil && seqHash(ctx, pc, founder, 2) == acked
	}); err != nil {
		t.Fatalf("%v\n%s", err, tailFile(founder.Dir+".log", 20))
	}
}

// seqHash is the hex hash of d's commit seq ("" when it has none or does not answer).
func seqHash(ctx context.Context, pc *ProcCluster, d *Device, seq uint64) string {
	c := pc.Client(d)
	if c == nil || !d.Running() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for ac := range c.Commits(ctx, seq, false) {
		if ac.Err != nil || ac.Seq != seq {
			return ""
		}
		h := sha256.Sum256(ac.Raw)
		return hex.EncodeToString(h[:])
	}
	return ""
}
