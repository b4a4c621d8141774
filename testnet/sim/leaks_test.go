package sim

import "testing"

// The goroutines a hashicorp/raft bug leaves blocked once every device stopped are
// counted apart, by bug; any other goroutine makes the lot a goroutine_stuck
// violation. The stacks are those of the sweep of 2026-12-03 (seed 1340862 of the
// default mix: a leadership transfer stuck, raft#696, beside a future from an earlier
// seed of the same worker, raft#498).
func TestClassifyRaftLeaks(t *testing.T) {
	future := `goroutine 280747 [select (durable), 2 minutes, synctest bubble 48]:
github.com/hashicorp/raft.(*deferError).Error(...)
	/root/go/pkg/mod/github.com/hashicorp/raft@v1.7.3/future.go:113`
	transfer := `goroutine 2456023 [chan send (durable), synctest bubble 433]:
github.com/hashicorp/raft.(*Raft).leadershipTransfer(0x14565c858588, {0x14565bef9240, 0x34})
	/root/go/pkg/mod/github.com/hashicorp/raft@v1.7.3/raft.go:1002 +0x129`
	loop := `goroutine 2456022 [chan receive (durable), synctest bubble 433]:
github.com/hashicorp/raft.(*Raft).leaderLoop.func2()
	/root/go/pkg/mod/github.com/hashicorp/raft@v1.7.3/raft.go:733 +0x90a`
	ours := `goroutine 12 [chan receive (durable), synctest bubble 433]:
github.com/batonhq/baton/signer.(*Loop).Run(0x1)
	/work/main/signer/loop.go:300`
	for _, c := range []struct {
		gs               []string
		future, transfer int
	}{
		{[]string{future, transfer, loop}, 1, 2},
		{[]string{future}, 1, 0},
		{[]string{transfer, loop, ours}, 0, 0},
		{[]string{"goroutine 1 [running]:"}, 0, 0},
	} {
		if f, tr := classifyRaftLeaks(c.gs); f != c.future || tr != c.transfer {
			t.Errorf("%d stacks: %d future, %d transfer leaks; want %d, %d", len(c.gs), f, tr, c.future, c.transfer)
		}
	}
}
