// Command etcdbench measures etcd beside baton: three embedded etcd members on
// 127.0.0.1 in this process (fsync on, etcd's defaults), Put of a payload of the given
// size by N concurrent writers through one client connected to the leader, for a
// window per writer count. It prints one JSON object on stdout: per writer count the
// Puts per second, the latency quantiles and the process's CPU per Put (all three
// members and the client: what `baton bench` reports for baton and plain Raft).
//
// `baton bench --etcd-bin PATH` runs it in the same run as its own sections
// (docs/BENCHMARKS.md). Each writer count runs twice: through a gRPC client over
// loopback TCP to the leader (what an etcd user runs; compare with baton's socket) and
// through etcd's in-process client, v3client (compare with baton's Go API). It is its
// own module so that etcd's dependencies stay out of baton's.
//
//	cd tools/etcdbench && go build -o /tmp/etcdbench . && /tmp/etcdbench --clients 1,16,64 --load 5s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// Load is one writer count's result.
type Load struct {
	Client     string  `json:"client"` // grpc (over loopback TCP) or inproc (v3client)
	Clients    int     `json:"clients"`
	PerSec     float64 `json:"per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	CPUUsPerOp float64 `json:"cpu_us_per_op"`
	Puts       int     `json:"puts"`
}

// Result is what the command prints.
type Result struct {
	Etcd         string  `json:"etcd"`
	Members      int     `json:"members"`
	PayloadBytes int     `json:"payload_bytes"`
	LoadWindowS  float64 `json:"load_window_s"`
	Loads        []Load  `json:"loads"`
}

func main() {
	dir := flag.String("dir", "", "data `directory` of the members (default: a new temporary one, removed at the end)")
	clients := flag.String("clients", "1,16,64", "comma-separated writer `counts`")
	load := flag.Duration("load", 5*time.Second, "each writer count's window")
	payload := flag.Int("payload", 200, "bytes per Put")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fail(fmt.Errorf("--clients: bad count %q", f))
		}
		counts = append(counts, n)
	}
	if *load <= 0 || *payload <= 0 {
		fail(errors.New("--load and --payload must be positive"))
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "etcdbench-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	members, err := startCluster(ctx, *dir, 3)
	if err != nil {
		fail(err)
	}
	defer func() {
		for _, m := range members {
			m.Close()
		}
	}()
	leader, err := waitLeader(ctx, members)
	if err != nil {
		fail(err)
	}
	grpc, err := clientv3.New(clientv3.Config{Endpoints: []string{leader.Config().AdvertiseClientUrls[0].String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		fail(err)
	}
	defer grpc.Close()
	inproc := v3client.New(leader.Server)
	defer inproc.Close()
	r := Result{Etcd: "3.7.3", Members: len(members), PayloadBytes: *payload, LoadWindowS: load.Seconds()}
	val := strings.Repeat("x", *payload)
	for _, cl := range []struct {
		name string
		cli  *clientv3.Client
	}{{"grpc", grpc}, {"inproc", inproc}} {
		for _, c := range counts {
			l, err := run(ctx, cl.cli, c, *load, val)
			if err != nil {
				fail(fmt.Errorf("%s, %d writers: %w", cl.name, c, err))
			}
			l.Client = cl.name
			r.Loads = append(r.Loads, l)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "etcdbench:", err)
	os.Exit(1)
}

// startCluster starts n members on free loopback ports under dir.
func startCluster(ctx context.Context, dir string, n int) ([]*embed.Etcd, error) {
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range cfgs {
		c := embed.NewConfig()
		c.Name = fmt.Sprintf("m%d", i)
		c.Dir = fmt.Sprintf("%s/m%d", dir, i)
		c.LogLevel = "error"
		c.LogOutputs = []string{dir + "/etcd.log"} // its close logs "errors" as it stops serving
		peer, client, err := freeURL(), freeURL(), error(nil)
		if peer == nil || client == nil {
			err = errors.New("no free loopback port")
		}
		if err != nil {
			return nil, err
		}
		c.ListenPeerUrls, c.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
		c.ListenClientUrls, c.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
		initial = append(initial, c.Name+"="+peer.String())
		cfgs[i] = c
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		out  = make([]*embed.Etcd, n)
		errs []error
	)
	for i, c := range cfgs {
		c.InitialCluster = strings.Join(initial, ",")
		c.InitialClusterToken = "etcdbench"
		c.ClusterState = embed.ClusterStateFlagNew
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := embed.StartEtcd(c)
			if err == nil {
				select {
				case <-e.Server.ReadyNotify():
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			out[i] = e
			if err != nil {
				errs = append(errs, fmt.Errorf("member %s: %w", c.Name, err))
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		for _, e := range out {
			if e != nil {
				e.Close()
			}
		}
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func freeURL() *url.URL {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil
	}
	defer ln.Close()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

func waitLeader(ctx context.Context, ms []*embed.Etcd) (*embed.Etcd, error) {
	for ctx.Err() == nil {
		for _, m := range ms {
			if m.Server.Leader() != 0 && uint64(m.Server.Leader()) == uint64(m.Server.MemberID()) {
				return m, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, errors.New("no etcd leader")
}

// run has c writers Put for window and measures them.
func run(ctx context.Context, cli *clientv3.Client, c int, window time.Duration, val string) (Load, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lats []time.Duration
		ferr error
	)
	cpu0 := cpuTime()
	start := time.Now()
	end := start.Add(window)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; time.Now().Before(end); i++ {
				t := time.Now()
				if _, err := cli.Put(ctx, fmt.Sprintf("k/%d/%d", w, i), val); err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	if ferr != nil {
		return Load{}, ferr
	}
	if len(lats) == 0 {
		return Load{}, errors.New("no Put completed")
	}
	slices.Sort(lats)
	q := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) / 1000 }
	return Load{Clients: c, PerSec: float64(len(lats)) / elapsed.Seconds(), P50Ms: q(0.5), P99Ms: q(0.99),
		CPUUsPerOp: float64(cpu.Microseconds()) / float64(len(lats)), Puts: len(lats)}, nil
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
