package chain

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingHeavy: a program that only verifies an exported chain must not
// pull in the network, the consensus or the storage stack.
func TestImportsNothingHeavy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	heavy := []string{"github.com/libp2p/", "github.com/hashicorp/raft", "go.etcd.io/bbolt",
		"github.com/prometheus/", "github.com/batonhq/baton/intentlog", "github.com/batonhq/baton/transport"}
	for _, dep := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if strings.HasPrefix(dep, h) {
				t.Errorf("signer/chain depends on %s", dep)
			}
		}
	}
}
