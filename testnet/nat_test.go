package testnet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// natNet is the NAT topology in network namespaces:
//
//	pub  11.0.0.1/24 on bridge br0 (the "internet"), the public member
//	r1   11.0.0.11 (wan, on br0) | 10.1.0.1 (lan): nftables masquerade, port-preserving,
//	     unsolicited inbound connections dropped
//	h1   10.1.0.2, default route via r1
//	r2   11.0.0.12 | 10.2.0.1: masquerade with random ports (symmetric), drops likewise
//	h2   10.2.0.2, default route via r2
//
// 11.0.0.0/24 is an address go-multiaddr calls public (198.18.0.0/15, the benchmark
// range, is unroutable to it, and relay and hole punching would never start).
type natNet struct {
	t      *testing.T
	prefix string
}

func (n *natNet) ns(name string) string { return n.prefix + name }

func (n *natNet) run(args ...string) {
	n.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (n *natNet) in(ns string, args ...string) {
	n.t.Helper()
	n.run(append([]string{"ip", "netns", "exec", n.ns(ns)}, args...)...)
}

// natNamespaces builds the topology or skips the test saying why it cannot.
func natNamespaces(t *testing.T, modes [2]string) *natNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("NAT test: needs root to create network namespaces (CI runs it as root)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("NAT test: %s not installed (apt-get install iproute2 nftables)", tool)
		}
	}
	n := &natNet{t: t, prefix: fmt.Sprintf("bnat%d-", os.Getpid()%100000)}
	if out, err := exec.Command("ip", "netns", "add", n.ns("pub")).CombinedOutput(); err != nil {
		t.Skipf("NAT test: ip netns unavailable here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		for _, s := range []string{"pub", "r1", "h1", "r2", "h2"} {
			_ = exec.Command("ip", "netns", "del", n.ns(s)).Run()
		}
	})
	for _, s := range []string{"r1", "h1", "r2", "h2"} {
		n.run("ip", "netns", "add", n.ns(s))
	}
	for _, s := range []string{"pub", "r1", "h1", "r2", "h2"} {
		n.in(s, "ip", "link", "set", "lo", "up")
	}
	n.in("pub", "ip", "link", "add", "br0", "type", "bridge")
	n.in("pub", "ip", "addr", "add", "11.0.0.1/24", "dev", "br0")
	n.in("pub", "ip", "link", "set", "br0", "up")
	for i, mode := range modes {
		r, h := fmt.Sprintf("r%d", i+1), fmt.Sprintf("h%d", i+1)
		wan, lan := fmt.Sprintf("11.0.0.1%d", i+1), fmt.Sprintf("10.%d.0", i+1)
		// wan: r<i> <-> a port of br0 in pub
		n.in("pub", "ip", "link", "add", "w"+r, "type", "veth", "peer", "name", "wan", "netns", n.ns(r))
		n.in("pub", "ip", "link", "set", "w"+r, "master", "br0", "up")
		n.in(r, "ip", "addr", "add", wan+"/24", "dev", "wan")
		n.in(r, "ip", "link", "set", "wan", "up")
		// lan: r<i> <-> h<i>
		n.in(r, "ip", "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", n.ns(h))
		n.in(r, "ip", "addr", "add", lan+".1/24", "dev", "lan")
		n.in(r, "ip", "link", "set", "lan", "up")
		n.in(h, "ip", "addr", "add", lan+".2/24", "dev", "eth0")
		n.in(h, "ip", "link", "set", "eth0", "up")
		n.in(h, "ip", "route", "add", "default", "via", lan+".1")
		n.in(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		rules := fmt.Sprintf(`table ip nat {
  chain postrouting { type nat hook postrouting priority 100; oifname "wan" masquerade %s; }
}
table inet filter {
  chain inputchain { type filter hook input priority 0; iifname "wan" ct state new drop; }
  chain forwardchain { type filter hook forward priority 0; iifname "wan" ct state new drop; }
}
`, mode)
		f := t.TempDir() + "/nft"
		if err := os.WriteFile(f, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
		n.in(r, "nft", "-f", f)
	}
	return n
}

// One public member and two devices behind separate NATs (one port-preserving,
// one symmetric) that cannot dial each other: they join through the public member,
// reach each other through it as a relay, a NAT'd device takes the lease over (a
// handover and then a kill -9 of the NAT'd holder), and the existing checker finds no
// fork and no acknowledged intent lost across every device's chain.
func TestProcsNAT(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	began := time.Now()
	n := natNamespaces(t, [2]string{"", "fully-random"})
	bin := buildBaton(t)
	ctx, cancel := context.WithTimeout(context.Background(), 110*time.Second)
	defer cancel()
	nss := []string{"pub", "h1", "h2"}
	listen := []string{"/ip4/11.0.0.1/tcp/7420", "/ip4/10.1.0.2/tcp/7420", "/ip4/10.2.0.2/tcp/7420"}
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: 3, TTL: time.Second, Tick: 100 * time.Millisecond,
		Dir:    t.TempDir(),
		Listen: func(i int) string { return listen[i] },
		Exec:   func(i int) []string { return []string{"ip", "netns", "exec", n.ns(nss[i])} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", pc.TailLogs(40))
		}
		_ = pc.Close()
	}()
	if err := pc.Start(ctx); err != nil {
		t.Fatalf("start (h1 and h2 join through the public member): %v", err)
	}
	t.Logf("started and joined after %v", time.Since(began).Round(time.Second))
	ds := pc.Devices()
	pub, h1, h2 := ds[0], ds[1], ds[2]
	peerOf := func(from, to *Device) (node.PeerState, bool) {
		st, ok := pc.State(from)
		if !ok {
			return node.PeerState{}, false
		}
		for _, p := range st.Peers {
			if p.ID == to.ID() {
				return p, true
			}
		}
		return node.PeerState{}, false
	}
	if err := pc.until(ctx, h1, "h1 and h2 reach each other (through the public member, or hole-punched)", func() bool {
		a, ok1 := peerOf(h1, h2)
		b, ok2 := peerOf(h2, h1)
		return ok1 && ok2 && a.Reachable && b.Reachable && a.Path != "" && b.Path != ""
	}); err != nil {
		t.Fatal(err)
	}
	a, _ := peerOf(h1, h2)
	t.Logf("h1 sees h2: path %s relay %s rtt %dus", a.Path, a.Relay, a.RTTMicros)
	if a.Path == "relayed" && a.Relay != pub.ID() {
		t.Fatalf("h1 reaches h2 through %s, want the public member %s", a.Relay, pub.ID())
	}

	load, err := StartLoad(ctx, LoadConfig{Targets: pc.LoadTargets(), Rate: 20, Max: 600, Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	holder, epoch, err := pc.WaitHolder(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The lease moves to a NAT'd device (forwarded and replicated through the relay).
	if err := pc.Transfer(ctx, holder, h1); err != nil {
		t.Fatal(err)
	}
	if holder, epoch, err = pc.WaitHolder(ctx, epoch); err != nil || holder != h1 {
		t.Fatalf("after the transfer to h1: holder %v epoch %d: %v", holder, epoch, err)
	}
	if err := pc.WaitSeq(ctx, h2, pc.MaxSeq()+5); err != nil {
		t.Fatalf("h1 signing, h2 following: %v", err)
	}
	// Signed latency with the NAT'd holder h1: submitted at h2 (which reaches h1 only
	// through the relay, unless hole-punched) and at the public member (direct to
	// h1), alternated. Numbers for docs/BENCHMARKS.md, never asserted.
	var viaRelay, direct []time.Duration
	for round := range 4 {
		for _, d := range []*Device{h2, pub} {
			sub := pc.DeviceTarget(d)()
			if len(sub) == 0 {
				t.Fatalf("%s not running", d.Label())
			}
			for i := range 5 {
				id := fmt.Sprintf("lat-%s-%d-%d", d.Name, round, i)
				start := time.Now()
				sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := sub[0].Submitter.Submit(sctx, intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "nat/" + id, Value: []byte(id)}, node.WaitSigned)
				scancel()
				if err != nil {
					t.Fatalf("submit %s at %s: %v", id, d.Label(), err)
				}
				if d == h2 {
					viaRelay = append(viaRelay, time.Since(start))
				} else {
					direct = append(direct, time.Since(start))
				}
			}
		}
	}
	p2, _ := peerOf(h2, h1)
	t.Logf("signed p50 with the holder behind a NAT: at h2 (%s to the holder) %v, at the public member (direct) %v (%d each)",
		p2.Path, median(viaRelay), median(direct), len(direct))
	// kill -9 the NAT'd holder: another device takes over and the chain continues.
	if err := pc.Kill(h1); err != nil {
		t.Fatal(err)
	}
	next, epoch, err := pc.WaitHolder(ctx, epoch, h1)
	if err != nil {
		t.Fatalf("no takeover after kill -9 of the NAT'd holder: %v", err)
	}
	t.Logf("after kill -9 of h1: %s holds at epoch %d", next.Label(), epoch)
	if next != h2 {
		// The other NAT'd device takes it from the public member.
		if err := pc.Transfer(ctx, next, h2); err != nil {
			t.Fatal(err)
		}
		if next, epoch, err = pc.WaitHolder(ctx, epoch, h1); err != nil || next != h2 {
			t.Fatalf("after the transfer to h2: holder %v: %v", next, err)
		}
	}
	if err := pc.WaitSeq(ctx, pub, pc.MaxSeq()+5); err != nil {
		t.Fatalf("h2 signing, pub following: %v", err)
	}
	if err := pc.Restart(ctx, h1); err != nil {
		t.Fatalf("restart h1: %v", err)
	}
	load.Stop()
	<-load.Done()
	t.Logf("load: %+v (%v since start)", load.Counts(), time.Since(began).Round(time.Second))
	if err := pc.WaitConverged(ctx, pc.MaxSeq()); err != nil {
		t.Fatal(err)
	}
	in, err := pc.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in.Acked = load.Acks()
	res := Check(in)
	t.Logf("acked %d, heads %v, findings %v", res.Acked, res.Heads, res.Findings)
	if res.Forks+res.Lost+res.Dupes+res.Invalid != 0 || !res.OK() || res.Acked == 0 || len(res.Heads) != 3 {
		t.Fatalf("checker: forks %d lost %d dupes %d invalid %d acked %d heads %v: %v",
			res.Forks, res.Lost, res.Dupes, res.Invalid, res.Acked, res.Heads, res.Findings)
	}
}
