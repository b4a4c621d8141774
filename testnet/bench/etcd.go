package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// SectionEtcd is the etcd comparison (--etcd-bin): etcd Put on three embedded members
// on this machine, in the same run (tools/etcdbench).
const SectionEtcd = "etcd"

// EtcdLoad is one writer count of tools/etcdbench: Put through a gRPC client over
// loopback to the leader ("grpc", beside baton's socket) or etcd's in-process client
// ("inproc", beside baton's Go API).
type EtcdLoad struct {
	Client     string  `json:"client"`
	Clients    int     `json:"clients"`
	PerSec     float64 `json:"per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	CPUUsPerOp float64 `json:"cpu_us_per_op"`
	Puts       int     `json:"puts"`
}

// runEtcd runs the etcdbench binary bin with this run's writer counts, window and
// payload, its members' data under dir.
func runEtcd(ctx context.Context, o Options, bin, dir string, r *Report) error {
	cs := make([]string, len(o.Clients))
	for i, c := range o.Clients {
		cs[i] = strconv.Itoa(c)
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--dir", dir, "--clients", strings.Join(cs, ","),
		"--load", o.LoadWindow.String(), "--payload", strconv.Itoa(o.Payload))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", bin, err, strings.TrimSpace(errb.String()))
	}
	var res struct {
		Etcd  string     `json:"etcd"`
		Loads []EtcdLoad `json:"loads"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res.Loads) == 0 {
		return fmt.Errorf("%s: not etcdbench's output (%v): %.200q", bin, err, out.String())
	}
	r.Etcd, r.EtcdVersion = res.Loads, res.Etcd
	for _, l := range res.Loads {
		o.progress("etcd %s %d writers: %.0f/s p50 %.2f ms", l.Client, l.Clients, l.PerSec, l.P50Ms)
	}
	return nil
}

// etcdRatios compares baton's signed figures with etcd Put's of the same kind of
// client (issue 41's targets: p50 at 1 client <= 1.5x, per second at 64 >= 1.0x).
func etcdRatios(r *Report) []Ratio {
	etcd := map[string]EtcdLoad{}
	for _, e := range r.Etcd {
		etcd[e.Client+"/"+strconv.Itoa(e.Clients)] = e
	}
	var out []Ratio
	for _, b := range r.Baton {
		kind := "inproc"
		if strings.HasPrefix(b.API, "socket") {
			kind = "grpc"
		}
		e, ok := etcd[kind+"/"+strconv.Itoa(b.Clients)]
		if !ok {
			continue
		}
		switch b.Clients {
		case 1:
			out = append(out, latencyAtMost("signed p50, 1 client ("+b.API+") / etcd Put p50 ("+kind+")", ratio(b.Signed.P50Ms, e.P50Ms), 1.5))
		case 64:
			out = append(out, atLeast("signed/s at 64 clients ("+b.API+") / etcd Put/s ("+kind+")", ratio(b.SignedPerSec, e.PerSec), 1.0))
		}
	}
	return out
}
