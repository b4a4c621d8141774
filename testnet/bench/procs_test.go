package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// TestMainProcsLoadWithoutRest: --procs measures the load phases over three `baton
// run` processes unless load is skipped (the flag's help), also when the idle window
// is skipped. Before, `--skip rest` dropped the processes' load rows without a word.
func TestMainProcsLoadWithoutRest(t *testing.T) {
	bin := testutil.BatonBinary(t)
	stdout, r := runMain(t, 120*time.Second, "--quick", "--procs", "--baton-bin", bin, "--skip", "baseline,stages,failover,rest",
		"--load", "300ms", "--clients", "2", "--ttl", "1s", "--tick", "50ms")
	if len(r.BatonProcs) != 1 || r.BatonProcs[0].SignedPerSec <= 0 || r.BatonProcs[0].Signed.N == 0 {
		t.Fatalf("rows over processes = %+v, want one row at 2 clients", r.BatonProcs)
	}
	if !strings.Contains(stdout, "socket, 3 processes") {
		t.Errorf("the table lacks the processes' row")
	}
	if r.AtRestProcs != nil {
		t.Errorf("rest was skipped, yet the processes' idle window was measured: %+v", r.AtRestProcs)
	}
}
