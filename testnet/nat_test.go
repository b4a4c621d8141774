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
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/internal/wait"
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
//	r<i> 11.0.0.1<i> (wan, on br0) | 10.<i>.0.1 (lan): nftables masquerade with
//	     modes[i-1] ("": port-preserving; "fully-random": symmetric), unsolicited
//	     inbound connections dropped
//	h<i> 10.<i>.0.2, default route via r<i>
//
// 11.0.0.0/24 is an address go-multiaddr calls public (198.18.0.0/15, the benchmark
// range, is unroutable to it, and relay and hole punching would never start).
type natNet struct {
	t      *testing.T
	prefix string
	spaces []string
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

// established reports whether namespace ns has an established TCP connection with
// a peer at ip.
func (n *natNet) established(ns, ip string) bool {
	out, err := exec.Command("ip", "netns", "exec", n.ns(ns), "ss", "-Htn", "state", "established", "dst", ip).CombinedOutput()
	return err == nil && strings.TrimSpace(string(out)) != ""
}

// meterPub counts the bytes the public member's network stack exchanges with each
// of the first k routers' public addresses (11.0.0.1<i>), from now; the returned
// function reads them (in+out per router).
func (n *natNet) meterPub(k int) func() []int64 {
	n.t.Helper()
	rules := "table ip bytesmeter {\n  chain in { type filter hook input priority 0;\n"
	for i := 1; i <= k; i++ {
		rules += fmt.Sprintf("    ip saddr 11.0.0.1%d counter\n", i)
	}
	rules += "  }\n  chain out { type filter hook output priority 0;\n"
	for i := 1; i <= k; i++ {
		rules += fmt.Sprintf("    ip daddr 11.0.0.1%d counter\n", i)
	}
	rules += "  }\n}\n"
	f := n.t.TempDir() + "/meter"
	if err := os.WriteFile(f, []byte(rules), 0o600); err != nil {
		n.t.Fatal(err)
	}
	n.in("pub", "nft", "-f", f)
	return func() []int64 {
		out, err := exec.Command("ip", "netns", "exec", n.ns("pub"), "nft", "list", "table", "ip", "bytesmeter").CombinedOutput()
		if err != nil {
			n.t.Fatalf("nft list: %v: %s", err, out)
		}
		got := make([]int64, k)
		for _, l := range strings.Split(string(out), "\n") {
			var dir, ip string
			var pk, by int64
			if _, err := fmt.Sscanf(strings.TrimSpace(l), "ip %s %s counter packets %d bytes %d", &dir, &ip, &pk, &by); err != nil {
				continue
			}
			var i int
			if _, err := fmt.Sscanf(ip, "11.0.0.1%d", &i); err == nil && i >= 1 && i <= k {
				got[i-1] += by
			}
		}
		return got
	}
}

// natNamespaces builds the topology or skips the test saying why it cannot.
func natNamespaces(t *testing.T, modes ...string) *natNet {
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
	n.spaces = []string{"pub"}
	t.Cleanup(func() {
		for _, s := range n.spaces {
			_ = exec.Command("ip", "netns", "del", n.ns(s)).Run()
		}
	})
	n.in("pub", "ip", "link", "set", "lo", "up")
	n.in("pub", "ip", "link", "add", "br0", "type", "bridge")
	n.in("pub", "ip", "addr", "add", "11.0.0.1/24", "dev", "br0")
	n.in("pub", "ip", "link", "set", "br0", "up")
	for i, mode := range modes {
		h := fmt.Sprintf("h%d", i+1)
		n.run("ip", "netns", "add", n.ns(h))
		n.spaces = append(n.spaces, h)
		n.in(h, "ip", "link", "set", "lo", "up")
		n.router(i+1, mode, h)
	}
	return n
}

// router adds r<i> (wan 11.0.0.1<i> on br0, lan 10.<i>.0.1/24, nftables masquerade
// with mode, unsolicited inbound connections dropped) with the host namespace h at
// 10.<i>.0.2 behind it (its eth0, default route via the router).
func (n *natNet) router(i int, mode, h string) {
	t := n.t
	t.Helper()
	r := fmt.Sprintf("r%d", i)
	n.run("ip", "netns", "add", n.ns(r))
	n.spaces = append(n.spaces, r)
	n.in(r, "ip", "link", "set", "lo", "up")
	wan, lan := fmt.Sprintf("11.0.0.1%d", i), fmt.Sprintf("10.%d.0", i)
	// wan: r<i> <-> a port of br0 in pub
	n.in("pub", "ip", "link", "add", "w"+r, "type", "veth", "peer", "name", "wan", "netns", n.ns(r))
	n.in("pub", "ip", "link", "set", "w"+r, "master", "br0", "up")
	n.in(r, "ip", "addr", "add", wan+"/24", "dev", "wan")
	n.in(r, "ip", "link", "set", "wan", "up")
	// lan: r<i> <-> h
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

// natModes: h1 and h2 behind port-preserving NATs (a hole punch between them can
// work), h3 behind a symmetric one (it cannot: its NAT picks a new port per
// destination, and drops what it did not ask for).
var natModes = []string{"", "", "fully-random"}

// startNATCluster starts a ProcCluster in n: slot 0 the public member (pub), slot i
// the device behind r<i>, listening on every interface as a laptop does (its
// address may change). A device joins with an invite of the public member, or of
// the member inviteFrom names (nil: the public member).
func startNATCluster(t *testing.T, ctx context.Context, n *natNet, nodes int, inviteFrom func(int) int,
	beforeInvite func(context.Context, *ProcCluster, *Device, *Device) error) *ProcCluster {
	t.Helper()
	bin := testutil.BatonBinary(t)
	var pc *ProcCluster
	var hook func(context.Context, *Device, *Device) error
	if beforeInvite != nil {
		hook = func(ctx context.Context, inviter, joiner *Device) error {
			return beforeInvite(ctx, pc, inviter, joiner)
		}
	}
	pc, err := NewProcCluster(ProcsConfig{Bin: bin, Nodes: nodes, TTL: time.Second, Tick: 100 * time.Millisecond,
		Dir: t.TempDir(),
		Listen: func(i int) string {
			if i == 0 {
				return "/ip4/11.0.0.1/tcp/7420"
			}
			return "/ip4/0.0.0.0/tcp/7420"
		},
		InviteFrom:   inviteFrom,
		BeforeInvite: hook,
		Exec: func(i int) []string {
			ns := "pub"
			if i > 0 {
				ns = fmt.Sprintf("h%d", i)
			}
			return []string{"ip", "netns", "exec", n.ns(ns)}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", pc.TailLogs(40))
		}
		_ = pc.Close()
	})
	if err := pc.Start(ctx); err != nil {
		t.Fatalf("start (the NAT'd devices join): %v", err)
	}
	return pc
}

// natPeer is from's view of to (its status peer entry).
func natPeer(pc *ProcCluster, from, to *Device) (node.PeerState, bool) {
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

// natPaths waits until every pair of running devices reaches each other, the
// pairs in direct by a direct path (both ways), the others by any path. Its error
// names the pairs that did not.
func natPaths(ctx context.Context, pc *ProcCluster, what string, direct map[[2]int]bool) error {
	ds := pc.Devices()
	var missing []string
	err := pc.until(ctx, ds[0], what, func() bool {
		missing = missing[:0]
		for _, a := range ds {
			for _, b := range ds {
				if a == b || !a.Running() || !b.Running() {
					continue
				}
				p, ok := natPeer(pc, a, b)
				want := direct[[2]int{a.Index, b.Index}] || direct[[2]int{b.Index, a.Index}]
				if !ok || !p.Reachable || p.Path == "" || (want && p.Path != "direct") {
					missing = append(missing, fmt.Sprintf("%s->%s (reachable %v, path %q, relay %s, probe error %q)",
						a.Name, b.Name, p.Reachable, p.Path, shortID(p.Relay), p.ProbeError))
				}
			}
		}
		return len(missing) == 0
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.Join(missing, "; "))
	}
	return nil
}

// natHandTo moves the lease to `to` (a transfer from whoever holds it; the holder may
// change meanwhile under load, so a few tries) and returns the epoch it holds at.
func natHandTo(ctx context.Context, pc *ProcCluster, to *Device) (uint64, error) {
	var last error
	for range 5 {
		holder, epoch, err := pc.WaitHolder(ctx, 0)
		if err != nil {
			return 0, err
		}
		if holder == to {
			return epoch, nil
		}
		if last = pc.Transfer(ctx, holder, to); last != nil {
			continue
		}
		if holder, epoch, err = pc.WaitHolder(ctx, epoch); err == nil && holder == to {
			return epoch, nil
		}
	}
	return 0, fmt.Errorf("lease not handed to %s: %w", to.Label(), last)
}

// checkNAT stops the load, waits for every device to converge and runs the checker
// over every Raft log: no fork, nothing acknowledged lost, every device's chain.
func checkNAT(t *testing.T, ctx context.Context, pc *ProcCluster, load *Load) {
	t.Helper()
	load.Stop()
	<-load.Done()
	t.Logf("load: %+v", load.Counts())
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
	if res.Forks+res.Lost+res.Dupes+res.Invalid != 0 || !res.OK() || res.Acked == 0 || len(res.Heads) != len(pc.Devices()) {
		t.Fatalf("checker: forks %d lost %d dupes %d invalid %d acked %d heads %v: %v",
			res.Forks, res.Lost, res.Dupes, res.Invalid, res.Acked, res.Heads, res.Findings)
	}
}

// One public member and three devices behind separate NATs that drop unsolicited
// connections: h1 and h2 port-preserving, h3 symmetric. They join through the public
// member; h1 and h2 go direct by a hole punch (DCUtR over TCP, reuseport), h3 stays
// relayed through the public member; a NAT'd device takes the lease over (a handover,
// then a kill -9 of the NAT'd holder), and the checker finds no fork and no
// acknowledged intent lost across every device's chain.
func TestProcsNAT(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	began := time.Now()
	n := natNamespaces(t, natModes...)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	// h3 joins with an invite of h1, a member behind a NAT: through the public member
	// as a relay, which relays it to h1 during h1's join window.
	pc := startNATCluster(t, ctx, n, 4, func(i int) int {
		if i == 3 {
			return 1
		}
		return 0
	}, func(ctx context.Context, pc *ProcCluster, inviter, joiner *Device) error {
		if joiner.Index != 3 {
			return nil
		}
		// The public member's own join window (its invites of h1 and h2) would admit
		// h3 by itself: replace it by one that closes at once, and wait it out.
		until := time.Now().Add(time.Second)
		if _, err := pc.Client(pc.Devices()[0]).AllowJoin(ctx, make([]byte, 32), until); err != nil {
			return err
		}
		return wait.Until(ctx, "the public member's join window to close", func() bool { return time.Now().After(until) })
	})
	t.Logf("started and joined (h3 invited by h1, behind a NAT) after %v (load %s)", time.Since(began).Round(time.Second), loadAvg())
	ds := pc.Devices()
	pub, h1, h2, h3 := ds[0], ds[1], ds[2], ds[3]
	joined := time.Now()
	if err := natPaths(ctx, pc, "h1 and h2 direct (hole-punched), h3 reached through the relay", map[[2]int]bool{{1, 2}: true}); err != nil {
		for _, pair := range [][2]*Device{{h1, h2}, {h2, h1}, {h1, h3}, {h3, h2}} {
			p, _ := natPeer(pc, pair[0], pair[1])
			t.Logf("%s sees %s: reachable %v path %q relay %s err %q", pair[0].Name, pair[1].Name, p.Reachable, p.Path, p.Relay, p.ProbeError)
		}
		t.Fatal(err)
	}
	t.Logf("h1-h2 direct %v after joining", time.Since(joined).Round(100*time.Millisecond))
	for _, pair := range [][2]*Device{{h1, h3}, {h3, h1}, {h2, h3}, {h3, h2}} {
		p, _ := natPeer(pc, pair[0], pair[1])
		if p.Path != "relayed" || p.Relay != pub.ID() {
			t.Fatalf("%s reaches %s (symmetric NAT on one side) by path %q relay %s, want relayed through the public member %s",
				pair[0].Name, pair[1].Name, p.Path, p.Relay, pub.ID())
		}
	}

	// At rest: what the public member's network stack carries to and from each NAT'd
	// device (its own Raft and probe traffic with it, plus the circuits it relays
	// for h3), over 20 s, scaled to an hour. A figure for docs/BENCHMARKS.md.
	rest := n.meterPub(3)
	restStart := time.Now()
	if err := wait.Until(ctx, "20 s at rest", func() bool { return time.Since(restStart) >= 20*time.Second }); err != nil {
		t.Fatal(err)
	}
	perHour := func(b int64) string {
		return fmt.Sprintf("%.1f MB/h", float64(b)*float64(time.Hour)/float64(time.Since(restStart))/1e6)
	}
	got := rest()
	t.Logf("at rest, through the public member's stack (in+out) per NAT'd device over %v: h1 %s, h2 %s, h3 (relayed to h1, h2) %s (load %s)",
		time.Since(restStart).Round(time.Second), perHour(got[0]), perHour(got[1]), perHour(got[2]), loadAvg())

	load, err := StartLoad(ctx, LoadConfig{Targets: pc.LoadTargets(), Rate: 20, Max: 800, Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The lease moves to a NAT'd device (forwarded and replicated through the relay
	// to h3, directly to h2).
	epoch, err := natHandTo(ctx, pc, h1)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.WaitSeq(ctx, h3, pc.MaxSeq()+5); err != nil {
		t.Fatalf("h1 signing, h3 following: %v", err)
	}
	// Signed latency with the NAT'd holder h1, submitted at h3 (relayed to h1), at h2
	// (hole-punched) and at the public member (direct to h1), alternated. Numbers
	// for docs/BENCHMARKS.md, never asserted.
	lat := map[*Device][]time.Duration{}
	for round := range 4 {
		for _, d := range []*Device{h3, h2, pub} {
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
				lat[d] = append(lat[d], time.Since(start))
			}
		}
	}
	t.Logf("signed p50 with the holder behind a NAT (%d each): at h3 (relayed) %v, at h2 (hole-punched) %v, at the public member (direct) %v (load %s)",
		len(lat[pub]), median(lat[h3]), median(lat[h2]), median(lat[pub]), loadAvg())
	// kill -9 the NAT'd holder: another device takes over and the chain continues.
	killed := time.Now()
	if err := pc.Kill(h1); err != nil {
		t.Fatal(err)
	}
	next, epoch, err := pc.WaitHolder(ctx, epoch, h1)
	if err != nil {
		t.Fatalf("no takeover after kill -9 of the NAT'd holder: %v", err)
	}
	t.Logf("failover after kill -9 of h1 (NAT'd holder): %s holds at epoch %d after %v (load %s)",
		next.Label(), epoch, time.Since(killed).Round(10*time.Millisecond), loadAvg())
	// The device behind the symmetric NAT takes it (reached only through the relay).
	if _, err := natHandTo(ctx, pc, h3); err != nil {
		t.Fatal(err)
	}
	if err := pc.WaitSeq(ctx, h2, pc.MaxSeq()+5); err != nil {
		t.Fatalf("h3 signing, h2 following: %v", err)
	}
	if err := pc.Restart(ctx, h1); err != nil {
		t.Fatalf("restart h1: %v", err)
	}
	checkNAT(t, ctx, pc, load)
	t.Logf("done in %v", time.Since(began).Round(time.Second))
}

// The relay member is cut (kill -9 of the public member, the only one the devices
// behind NATs can dial) while a device behind the symmetric NAT holds the lease: the
// cluster stalls (no quorum reaches each other) and recovers once it returns, with
// the relayed paths found again. Then a NAT'd device changes address (its router's
// public address and its own, as a laptop on new wifi): it is found again without
// an operator and follows the chain. No fork, nothing acknowledged lost.
func TestProcsNATRelayCut(t *testing.T) {
	if testing.Short() {
		t.Skip("procs mode builds and runs the binary")
	}
	began := time.Now()
	n := natNamespaces(t, natModes...)
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	pc := startNATCluster(t, ctx, n, 4, nil, nil)
	ds := pc.Devices()
	pub, h1, h2, h3 := ds[0], ds[1], ds[2], ds[3]
	if err := natPaths(ctx, pc, "every pair reaches each other", nil); err != nil {
		t.Fatal(err)
	}
	load, err := StartLoad(ctx, LoadConfig{Targets: pc.LoadTargets(), Rate: 20, Max: 1200, Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := natHandTo(ctx, pc, h3)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.WaitSeq(ctx, h1, pc.MaxSeq()+5); err != nil {
		t.Fatalf("h3 signing, h1 following: %v", err)
	}

	// Cut the relay: h3 reaches nobody, h1 and h2 (direct or not) are two of four.
	if err := pc.Kill(pub); err != nil {
		t.Fatal(err)
	}
	if err := pc.until(ctx, h3, "h3 to lose the lease (no quorum without the relay)", func() bool {
		st, ok := pc.State(h3)
		return ok && !st.Lease.HeldByMe
	}); err != nil {
		t.Fatal(err)
	}
	stalled := pc.MaxSeq()
	back := time.Now()
	if err := pc.Restart(ctx, pub); err != nil {
		t.Fatalf("restart the public member: %v", err)
	}
	if _, epoch, err = pc.WaitHolder(ctx, epoch); err != nil {
		t.Fatalf("no holder after the relay member returned: %v", err)
	}
	for _, d := range ds {
		if err := pc.WaitSeq(ctx, d, stalled+5); err != nil {
			t.Fatalf("%s not following after the relay member returned: %v", d.Label(), err)
		}
	}
	t.Logf("relay member back: signing again at every device after %v (load %s)", time.Since(back).Round(10*time.Millisecond), loadAvg())
	if err := natPaths(ctx, pc, "every pair reaches each other again", nil); err != nil {
		t.Fatal(err)
	}

	// h1 moves, as a laptop from home to a café: its link to r1 goes away and it is
	// plugged behind a new port-preserving NAT r4 (public 11.0.0.14, lan 10.4.0.0/24).
	// Its connections through r1 are dead without either end being told.
	moved := time.Now()
	n.in("h1", "ip", "link", "del", "eth0")
	n.router(4, "", "h1")
	// The public member reaches it again, over a connection from the new router.
	if err := pc.until(ctx, pub, "a connection from h1's new router at the public member", func() bool {
		return n.established("pub", "11.0.0.14")
	}); err != nil {
		natDump(t, n, pc)
		t.Fatal(err)
	}
	t.Logf("h1 moved: connected from its new router after %v", time.Since(moved).Round(10*time.Millisecond))
	if err := pc.until(ctx, pub, "the public member to reach h1 again", func() bool {
		p, ok := natPeer(pc, pub, h1)
		return ok && p.Reachable && p.Path == "direct"
	}); err != nil {
		natDump(t, n, pc)
		t.Fatal(err)
	}
	t.Logf("h1 moved: reachable at the public member after %v", time.Since(moved).Round(10*time.Millisecond))
	reachable := time.Now()
	if err := pc.WaitSeq(ctx, h1, pc.MaxSeq()+5); err != nil {
		t.Fatalf("h1 not following after its move: %v", err)
	}
	t.Logf("h1 moved: found again and following after %v (load %s)", time.Since(moved).Round(10*time.Millisecond), loadAvg())
	// Reachable again, it follows within a few seconds (issue 39 item 8: the leader's
	// streams stayed on h1's dead connection, 26-35 s after the move in 3 of 5 runs,
	// while h1 was reachable after 5-7 s; now 0.1-0.6 s after, in 4 of 4).
	if d := time.Since(reachable); d > 5*time.Second {
		t.Errorf("h1 reachable again at the public member followed the chain only %v later", d.Round(10*time.Millisecond))
	}
	if err := natPaths(ctx, pc, "every pair reaches each other after h1 moved", nil); err != nil {
		t.Fatal(err)
	}
	_ = h2
	checkNAT(t, ctx, pc, load)
	t.Logf("done in %v", time.Since(began).Round(time.Second))
}

// loadAvg is the 1-minute load average (for figures that go in docs/BENCHMARKS.md).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// natDump logs every pair's view and the namespaces' sockets (a failed wait).
func natDump(t *testing.T, n *natNet, pc *ProcCluster) {
	t.Helper()
	for _, a := range pc.Devices() {
		for _, b := range pc.Devices() {
			if a == b {
				continue
			}
			p, ok := natPeer(pc, a, b)
			t.Logf("%s sees %s: ok %v connected %v reachable %v path %q relay %s addrs %v err %q", a.Name, b.Name, ok, p.Connected, p.Reachable, p.Path, shortID(p.Relay), p.Addrs, p.ProbeError)
		}
	}
	for _, ns := range []string{"pub", "h1"} {
		out, err := exec.Command("ip", "netns", "exec", n.ns(ns), "ss", "-tn").CombinedOutput()
		t.Logf("%s sockets (%v):\n%s", ns, err, out)
	}
}
