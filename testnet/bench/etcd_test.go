package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The etcd section runs the etcdbench binary it is given with this run's writer
// counts, window and payload, and puts its rows in the table and its ratios beside
// the baseline's: baton's Go API against etcd's in-process client, its socket against
// a gRPC client (issue 41: signed p50 at 1 client <= 1.5x etcd Put, signed/s at 64
// clients >= 1.0x). A script stands in for tools/etcdbench (whose build pulls etcd's
// server); it checks its arguments.
func TestEtcdSection(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "etcdbench")
	script := `#!/bin/sh
[ "$3 $4 $5 $6 $7 $8" = "--clients 1,64 --load 2s --payload 200" ] || { echo "args: $*" >&2; exit 2; }
echo '{"etcd":"3.7.3","loads":[{"client":"grpc","clients":1,"per_sec":1000,"p50_ms":1.0,"p99_ms":2.0,"cpu_us_per_op":250},{"client":"grpc","clients":64,"per_sec":5000,"p50_ms":9,"p99_ms":20,"cpu_us_per_op":220},{"client":"inproc","clients":1,"per_sec":1300,"p50_ms":0.8,"p99_ms":1.5,"cpu_us_per_op":200},{"client":"inproc","clients":64,"per_sec":5500,"p50_ms":8,"p99_ms":18,"cpu_us_per_op":200}]}'
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Clients: []int{1, 64}, LoadWindow: 2 * time.Second, Payload: 200}
	r := &Report{}
	if err := runEtcd(context.Background(), o, bin, filepath.Join(dir, "etcd"), r); err != nil {
		t.Fatal(err)
	}
	if len(r.Etcd) != 4 || r.EtcdVersion != "3.7.3" {
		t.Fatalf("etcd rows: %+v (version %q)", r.Etcd, r.EtcdVersion)
	}
	r.Baton = []BatonLoad{
		{API: "go", Clients: 1, Signed: Dist{P50Ms: 1.3}},
		{API: "go", Clients: 64, SignedPerSec: 4500},
		{API: "socket", Clients: 1, Signed: Dist{P50Ms: 1.4}},
		{API: "socket", Clients: 64, SignedPerSec: 5100},
	}
	want := map[string]bool{
		"signed p50, 1 client (go) / etcd Put p50 (inproc)":   false, // 1.625
		"signed/s at 64 clients (go) / etcd Put/s (inproc)":   false, // 0.82
		"signed p50, 1 client (socket) / etcd Put p50 (grpc)": true,  // 1.4
		"signed/s at 64 clients (socket) / etcd Put/s (grpc)": true,  // 1.02
	}
	got := map[string]Ratio{}
	for _, x := range etcdRatios(r) {
		got[x.Name] = x
	}
	for name, met := range want {
		if x, ok := got[name]; !ok || x.Met != met {
			t.Errorf("%s: %+v (present %v), want met %v", name, x, ok, met)
		}
	}
	var out bytes.Buffer
	r.Print(&out)
	if !strings.Contains(out.String(), "etcd 3.7.3 Put|") || !strings.Contains(out.String(), "inproc|") {
		t.Errorf("the table has no etcd rows:\n%s", out.String())
	}

	// A binary that is not etcdbench is an error that says so.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := runEtcd(context.Background(), o, bin, dir, &Report{}); err == nil || !strings.Contains(err.Error(), "not etcdbench's output") {
		t.Errorf("a binary that is not etcdbench: %v", err)
	}
}
