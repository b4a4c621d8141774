package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

const statusLong = `Shows this device, Raft (role, leader, term, indexes), whether it reaches a quorum,
the lease (holder, epoch, expires in), the chain head (on an atproto chain also the
repository's DID and rev), pending intents, the signer
loop's last error and how long ago it happened, and every member with its
reachability as this device measures it (a probe every second: answering or why not,
direct or relayed and through which member, round trip, since when) and when it was
last heard from. Answers even without a quorum (then it
says so: this device's view of the lease may be stale).`

const statusExample = `  baton status --data /tmp/b1
  baton status --data /tmp/b1 --json | jq .quorum`

func (c *cli) statusCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "status [--json]", Short: "show this device, Raft, the quorum, the lease, the head and the members",
		Long: statusLong, Example: statusExample, Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Second, "waiting for the node")
	asJSON := cmd.Flags().Bool("json", false, "print the state as JSON (GET /v1/state)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cl, st, cctx, done, err := f.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		if *asJSON {
			return printJSON(c.stdout, st)
		}
		printStatus(c.stdout, st, repoLine(cctx, cl, st.Chain))
		if pv, err := cl.Public(cctx); err == nil {
			printPublic(c.stdout, pv, time.Now())
		}
		if rs, err := cl.Relays(cctx); err == nil {
			printRelays(c.stdout, rs)
		}
		return nil
	}
	return cmd
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// ago is a duration rounded for people.
func ago(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// repoLine describes an atproto chain's repository (its DID and rev, from
// com.atproto.sync.listRepos over the API), or "" on a chain of baton's format.
func repoLine(ctx context.Context, cl *api.Client, chainDID string) string {
	if f, err := signer.FormatOfDID(chainDID); err != nil || f.ID() != chain.FormatAtproto {
		return ""
	}
	body, err := cl.XRPC(ctx, "com.atproto.sync.listRepos", nil)
	var out struct {
		Repos []struct{ DID, Rev string }
	}
	if err == nil {
		err = json.Unmarshal(body, &out)
	}
	switch {
	case err != nil:
		return "unknown (" + oneLine(cleanText(err.Error())) + ")"
	case len(out.Repos) == 0:
		return "no commit yet"
	}
	return out.Repos[0].DID + " at rev " + out.Repos[0].Rev
}

// printRelays prints each relay's view of the repository's host (run --crawl).
// printPublic says what the public listener serves: where, under which name, and
// the certificate (its names, issuer and expiry) when it serves TLS itself.
func printPublic(w io.Writer, pv api.PublicView, now time.Time) {
	if pv.Addr == "" {
		return
	}
	line := "public: " + pv.Addr
	if pv.Host != "" {
		line += " as " + pv.Host
	}
	if !pv.TLS {
		line += ", plain HTTP (TLS from a proxy in front, or none)"
	}
	fmt.Fprintln(w, line)
	switch c := pv.Certificate; {
	case c == nil:
	case c.Err != "":
		fmt.Fprintf(w, "  certificate: %s\n", c.Err)
	default:
		left := c.NotAfter.Sub(now)
		warn := ""
		if left < 14*24*time.Hour {
			warn = " (renewal overdue? the log says why)"
		}
		fmt.Fprintf(w, "  certificate: %s, by %s, expires %s, in %d days%s\n", strings.Join(c.Names, ","), c.Issuer,
			c.NotAfter.UTC().Format("2006-01-02"), int(left.Hours()/24), warn)
	}
}

func printRelays(w io.Writer, rs []api.RelayView) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "relays: %d (asked to crawl this repository)\n", len(rs))
	for _, r := range rs {
		view := cmp.Or(r.Status, "not asked yet")
		if r.Status != "" && r.Seq > 0 {
			view += fmt.Sprintf(", seq %d", r.Seq)
		}
		if !r.Asked.IsZero() {
			view += ", asked " + ago(time.Since(r.Asked)) + " ago"
		}
		view += fmt.Sprintf("; %d crawl requests", r.Requests)
		if !r.Requested.IsZero() {
			view += ", the last " + ago(time.Since(r.Requested)) + " ago"
		}
		if r.Err != "" {
			view += "; error: " + oneLine(cleanText(r.Err))
		}
		fmt.Fprintf(w, "  %s  %s\n", r.Relay, view)
	}
}

// printStatus prints st; repo, when not "", is the atproto repository's line.
func printStatus(w io.Writer, st node.State, repo string) {
	names := map[string]string{st.ID: st.Name}
	for _, p := range st.Peers {
		names[p.ID] = p.Name
	}
	me := func(id string) string {
		switch id {
		case "":
			return "none"
		case st.ID:
			return named(id, st.Name) + " (this device)"
		}
		return named(id, names[id])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "device\t%s\n", named(st.ID, st.Name))
	if st.Removed {
		how := "was removed from the cluster by another member"
		if st.RemovedHow == "left" {
			how = "left the cluster (baton leave)"
		}
		fmt.Fprintf(tw, "REMOVED\tthis device %s; it no longer replicates: what follows is its last view\n", how)
	}
	if !st.Healthy {
		fmt.Fprintf(tw, "UNHEALTHY\t%s: this device neither claims nor signs; stop it and run `baton repair --data DIR`, then start it again\n", oneLine(cleanText(st.Problem)))
	}
	if st.Defect != "" {
		fmt.Fprintf(tw, "DEFECT\t%s (signing goes on; please report it)\n", oneLine(cleanText(st.Defect)))
	}
	fmt.Fprintf(tw, "chain\t%s\n", st.Chain)
	if repo != "" {
		fmt.Fprintf(tw, "repository\t%s\n", repo)
	}
	signs := "yes"
	if !st.Signer {
		signs = "no (replica without the chain key)"
	}
	fmt.Fprintf(tw, "can sign\t%s\n", signs)
	role := lower(st.Raft.Role)
	fmt.Fprintf(tw, "raft\t%s, term %d, leader %s\n", role, st.Raft.Term, me(st.Raft.Leader))
	contact := "never"
	switch {
	case st.Raft.Role == "Leader":
		contact = "- (leader)"
	case st.Raft.LastContactMs >= 0:
		contact = ago(ms(st.Raft.LastContactMs)) + " ago"
	}
	fmt.Fprintf(tw, "raft index\tcommit %d, applied %d, last %d; leader last heard %s\n", st.Raft.CommitIndex, st.Raft.AppliedIndex, st.Raft.LastIndex, contact)
	q := st.Quorum
	if r := st.Rejoin; r != nil {
		target := "asking the leader how far"
		if r.Target > 0 {
			target = fmt.Sprintf("applied %d of %d", r.Applied, r.Target)
		}
		fmt.Fprintf(tw, "re-sync\tthis device lost Raft state (%s); it does not vote until it has caught up (%s)\n", r.Reason, target)
	}
	switch {
	case st.Removed:
		fmt.Fprintf(tw, "quorum\tnone: this device is no longer a member\n")
	case st.Rejoin != nil && q.Voters == 0:
		fmt.Fprintf(tw, "quorum\tunknown: this device has no Raft configuration yet; it waits for the leader of the members that hold the history "+
			"(if every member was repaired or lost its log, none does: do not bootstrap, that starts a second history)\n")
	case q.OK && st.Raft.Role == "Leader":
		fmt.Fprintf(tw, "quorum\tok (%d of %d voters reachable, %d needed)\n", q.Reachable, q.Voters, q.Needed)
	case q.OK:
		fmt.Fprintf(tw, "quorum\tok (the leader is heard from; %d voters, %d needed)\n", q.Voters, q.Needed)
	default:
		since := ""
		if q.LeaderlessMs > 0 {
			since = fmt.Sprintf(" for %s", ago(ms(q.LeaderlessMs)))
		}
		fmt.Fprintf(tw, "quorum\tLOST: no Raft leader%s; %d of %d voters reachable, %d needed. Nothing can be submitted or signed until a majority is back\n",
			since, q.Reachable, q.Voters, q.Needed)
	}
	stale := !q.OK || st.Removed
	switch {
	case st.Lease.Holder == "" && st.Lease.Epoch == 0:
		fmt.Fprintf(tw, "lease\tnever held\n")
	case st.Lease.Holder == "":
		fmt.Fprintf(tw, "lease\treleased (epoch %d): the next claim wins\n", st.Lease.Epoch)
	default:
		exp := ms(st.Lease.ExpiresInMs)
		state := "expires in " + ago(exp)
		switch {
		case st.Lease.HeldByMe:
			state = "held by this device, may sign for " + ago(exp)
		case st.Lease.Holder == st.ID && stale:
			state = "this device's hold lapsed: it cannot renew without a quorum"
		case st.Lease.Holder == st.ID:
			state = "named in the record, but this device may not sign now (its hold lapsed, or it awaits a fresh write)"
		case stale && st.Lease.Free:
			state = "no renewal seen here for a TTL, but this device's view is stale (no quorum): it may be live"
		case stale:
			state += " as last seen here (stale: no quorum)"
		case st.Lease.Free:
			state = "lapsed: no renewal for a TTL; a standby claims it"
		}
		fmt.Fprintf(tw, "lease\t%s, epoch %d, %s (ttl %s)\n", me(st.Lease.Holder), st.Lease.Epoch, state, ms(st.Lease.TTLMs))
	}
	if st.Head.Seq == 0 {
		fmt.Fprintf(tw, "head\tempty chain\n")
	} else {
		fmt.Fprintf(tw, "head\tseq %d, hash %s, epoch %d, signed by %s\n", st.Head.Seq, st.Head.Hash, st.Head.Epoch, me(st.Head.Signer))
	}
	fmt.Fprintf(tw, "pending\t%d intents (%d bytes)\n", st.Pending, st.Bytes)
	if st.Signer {
		fmt.Fprintf(tw, "signer loop\t%d commits accepted, %d rejected, %d claims, %d renewals\n", st.Loop.CommitsAccepted, st.Loop.CommitsRejected, st.Loop.LeaseClaims, st.Loop.LeaseRenews)
		if st.Loop.LastError != "" {
			age := st.Loop.LastErrorAgeMs
			if age == 0 && !st.Loop.LastErrorAt.IsZero() {
				age = time.Since(st.Loop.LastErrorAt).Milliseconds()
			}
			fmt.Fprintf(tw, "last error\t%s ago: %s\n", ago(ms(age)), oneLine(cleanText(st.Loop.LastError)))
		}
	}
	if st.SuspectedSkew {
		fmt.Fprintf(tw, "clock\tSUSPECTED SKEW: this device's wall clock disagrees with the lease record (%d reports)\n", st.SkewReports)
	}
	printClock(tw, st.Clock)
	tw.Flush()
	printPeers(w, st, "")
}

// printPeers writes the members table: one line per member of the list the count
// comes from.
func printPeers(w io.Writer, st node.State, indent string) {
	fmt.Fprintf(w, "members: %d\n", len(st.Peers))
	if len(st.Peers) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  ID\tNAME\tROLE\tREACHABLE\tPATH\tRTT\tSINCE\tLAST HEARD\tADDRESS\n")
	for _, p := range st.Peers {
		role := "voter"
		if !p.Voter {
			role = "non-voter"
		}
		if p.Leader {
			role += ",leader"
		}
		if p.ID == st.Lease.Holder {
			role += ",holder"
		}
		reach, heard := "no", "never"
		switch {
		case p.Self:
			reach, heard = "self", "-"
		case p.Reachable:
			reach = "yes"
		case p.Unknown:
			reach = "unknown (not probed yet)"
		case p.Connected:
			reach = "no (connected, silent)"
		case p.ProbeError != "":
			reach = "no (" + p.ProbeError + ")"
		}
		path, rtt, since := "-", "-", "-"
		if !p.Self {
			switch {
			case p.Path == "relayed" && p.Relay != "":
				path = "relayed via " + shortPeer(p.Relay)
			case p.Path != "":
				path = p.Path
			default:
				path = "none"
			}
			if p.Reachable && p.RTTMicros > 0 {
				rtt = (time.Duration(p.RTTMicros) * time.Microsecond).String()
			}
			if p.SinceMs >= 0 {
				since = ago(ms(p.SinceMs))
			}
		}
		if !p.Self && p.LastSeenMs >= 0 {
			heard = ago(ms(p.LastSeenMs)) + " ago"
		}
		if p.StalledMs > 0 {
			reach += fmt.Sprintf(", writes stalled %s", ago(ms(p.StalledMs)))
		}
		addr := pathAddr(p)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, cmp.Or(p.Name, "-"), role, reach, path, rtt, since, heard, addr)
	}
	tw.Flush()
	if len(st.RemovedMembers) > 0 {
		fmt.Fprintf(w, "%sremoved: %d (they left or another member removed them; they cannot run again from their data dirs)\n", indent, len(st.RemovedMembers))
		for _, r := range st.RemovedMembers {
			fmt.Fprintf(w, "%s  %s  removed at configuration index %d\n", indent, r.ID, r.ConfigIndex)
		}
	}
}

// named is a member's ID followed by its name when it has one.
func named(id, name string) string {
	if name == "" {
		return id
	}
	return id + " (" + name + ")"
}

// pathAddr is the member's address to show beside its path: a direct one under
// "direct", a relayed (p2p-circuit) one under "relayed", else the first known.
func pathAddr(p node.PeerState) string {
	if len(p.Addrs) == 0 {
		return "-"
	}
	for _, a := range p.Addrs {
		if relayed := strings.Contains(a, "/p2p-circuit"); relayed == (p.Path == "relayed") {
			return a
		}
	}
	if p.Path == "direct" {
		return "-" // only relayed addresses are known: the direct one is the connection's
	}
	return p.Addrs[0]
}

func lower(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if 'A' <= ch && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}
