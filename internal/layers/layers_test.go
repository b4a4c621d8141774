package layers

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/batonhq/baton/"

// Layers, lowest first (docs/DESIGN.md, "Packages"): each entry is a package path
// below the module, or a prefix ending in "/" for a whole subtree. A package belongs
// to the first layer with the longest entry that matches it.
var layers = []struct {
	name     string
	packages []string
}{
	{"leaves: no baton package below them", []string{"internal/knobs", "internal/stages", "internal/wait", "signer/chain", "signer/chain/", "signer/acme", "transport"}},
	{"the state machine", []string{"intentlog"}},
	{"the lease", []string{"election", "internal/devclock"}},
	{"the signer and the node", []string{"signer", "signer/node", "signer/device", "signer/api"}},
	{"drills, tests' helpers and the binary", []string{"testnet", "testnet/", "internal/testutil", "internal/layers", "cmd/"}},
}

// layerOf returns p's layer (an index into layers), or -1 when no entry names it.
func layerOf(p string) int {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, e := range l.packages {
			match := p == e || strings.HasSuffix(e, "/") && strings.HasPrefix(p, e)
			if match && len(e) > bestLen {
				best, bestLen = i, len(e)
			}
		}
	}
	return best
}

// violations lists each import of graph (package -> its non-test imports, paths below
// the module) that goes to a higher layer, and each package no layer names.
func violations(graph map[string][]string) []string {
	var out []string
	for p, imps := range graph {
		lp := layerOf(p)
		if lp < 0 {
			out = append(out, fmt.Sprintf("%s is in no layer: place it in layers (and in docs/DESIGN.md, \"Packages\")", p))
			continue
		}
		for _, imp := range imps {
			if li := layerOf(imp); li > lp {
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s), a higher layer", p, layers[lp].name, imp, layers[li].name))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestLayers: no package imports one of a higher layer, and every package has a layer.
func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		own := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				graph[own] = append(graph[own], strings.TrimPrefix(imp, module))
			}
		}
		if _, ok := graph[own]; !ok {
			graph[own] = nil
		}
	}
	if len(graph) < 20 {
		t.Fatalf("go list found %d packages: not the module?", len(graph))
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
}

// The check itself: an upward import and a package without a layer are reported.
func TestViolationsFound(t *testing.T) {
	got := violations(map[string][]string{
		"intentlog":            {"internal/knobs", "signer/node"},
		"signer/chain/x":       nil,
		"testnet/sim":          {"signer/node", "intentlog"},
		"newpackage":           nil,
		"signer/acme":          nil,
		"cmd/baton":            {"testnet/bench"},
		"election":             {"intentlog"},
		"internal/devclock":    {"election"},
		"internal/testutil":    {"transport"},
		"signer/chain/atproto": {"signer/chain"},
	})
	want := []string{
		`intentlog (the state machine) imports signer/node (the signer and the node), a higher layer`,
		`newpackage is in no layer: place it in layers (and in docs/DESIGN.md, "Packages")`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
