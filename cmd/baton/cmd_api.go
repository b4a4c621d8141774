package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
)

// apiFlags are the flags of the commands that talk to a running node.
type apiFlags struct {
	data      *string
	api       *string
	tokenFile *string
	getenv    func(string) string
}

func (c *cli) addAPIFlags(fs *flag.FlagSet) *apiFlags {
	return &apiFlags{
		data:      dataFlag(fs),
		api:       fs.String("api", "", "the node's API: a Unix socket `path` or http://host:port (default DIR/baton.sock)"),
		tokenFile: fs.String("api-token-file", "", "with a TCP --api: the bearer token `file` (default DIR/api.token; or set BATON_API_TOKEN)"),
		getenv:    c.getenv,
	}
}

func (f *apiFlags) target() string {
	if *f.api != "" {
		return *f.api
	}
	return filepath.Join(*f.data, socketFile)
}

// client connects to the node's API; a bad --api value is a usage error.
func (f *apiFlags) client() (*api.Client, error) {
	tok, err := f.token()
	if err != nil {
		return nil, err
	}
	cl, err := api.NewClient(f.target(), tok)
	if err != nil {
		return nil, usagef("--api: %v", err)
	}
	return cl, nil
}

// token is the bearer token for a TCP --api: BATON_API_TOKEN, else the token file
// (--api-token-file, or DIR/api.token when it exists). The socket needs none.
func (f *apiFlags) token() (string, error) {
	if !strings.HasPrefix(f.target(), "http") {
		return "", nil
	}
	if f.getenv != nil {
		if tok := f.getenv("BATON_API_TOKEN"); tok != "" {
			return tok, nil
		}
	}
	path := *f.tokenFile
	if path == "" {
		path = filepath.Join(*f.data, apiTokenFile)
		if _, err := os.Stat(path); err != nil {
			return "", nil // the server will answer unauthorized, with its message
		}
	}
	tok, err := readToken(path)
	if err != nil {
		return "", usagef("--api-token-file: %v", err)
	}
	return tok, nil
}

// apiErr turns "no node listening" into advice; other errors pass through.
func (f *apiFlags) apiErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("no node is running on %s (start one with `baton run --data %s`)", f.target(), *f.data)
	}
	return err
}

// callTimeout bounds one API call of a command (not the streams of tail).
const callTimeout = 30 * time.Second

// ----- invite -----

const inviteUsage = `Usage: baton invite [--data DIR] [--ttl 1h] [--with-chain-key]

Asks the node running on DIR to open a join window and prints a one-line invite (to
stdout; notes go to stderr). Give the invite to the new device out of band; there run
` + "`baton join --data DIR2 INVITE`" + `. The invite carries the network key, the member
addresses, a join token valid for --ttl (only the newest invite's token is valid), and,
with --with-chain-key, the chain key: the new device can then sign. Treat an invite like
a password.

Examples:
  baton invite --data /tmp/b1 --with-chain-key > invite.txt
  baton join --data /tmp/b2 --listen /ip4/127.0.0.1/tcp/7402 "$(cat invite.txt)"
`

func cmdInvite(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("invite", inviteUsage)
	f := c.addAPIFlags(fs)
	ttl := fs.Duration("ttl", time.Hour, "how long the join token stays valid")
	withKey := fs.Bool("with-chain-key", false, "include the chain key (the new device can sign)")
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	if *ttl < time.Minute || *ttl > api.MaxJoinWindowOpen {
		return usagef("--ttl must be between 1m and %s", api.MaxJoinWindowOpen)
	}
	d, err := loadDevice(*f.data)
	if err != nil {
		return err
	}
	var seed []byte
	if *withKey {
		if d.key == nil {
			return fmt.Errorf("%s has no chain key to share (a replica)", *f.data)
		}
		if seed, err = chainKeySeed(filepath.Join(d.dir, chainKeyFile)); err != nil {
			return err
		}
	}
	token, err := newJoinToken()
	if err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	until := time.Now().Add(*ttl).Truncate(time.Second)
	w, err := cl.AllowJoin(cctx, token, until)
	if err != nil {
		return f.apiErr(err)
	}
	if w.Chain != d.chain {
		return fmt.Errorf("the node on %s serves %s, but %s holds keys of %s", f.target(), w.Chain, *f.data, d.chain)
	}
	if len(w.Addrs) == 0 {
		return errors.New("the node reports no listen addresses")
	}
	s, err := encodeInvite(invite{psk: d.psk, chain: d.chain, addrs: w.Addrs, token: token, exp: until}, seed)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, s)
	if *withKey {
		fmt.Fprintln(c.stderr, "warning: this invite contains the chain key: anyone holding it can sign as this chain. Share it only over a channel you trust.")
	} else {
		fmt.Fprintln(c.stderr, "note: without --with-chain-key the new device replicates and verifies but never signs.")
	}
	fmt.Fprintf(c.stderr, "valid until %s (join window on %s)\n", until.Format(time.RFC3339), shortPeer(w.ID))
	return nil
}

// ----- leave -----

const leaveUsage = `Usage: baton leave [--data DIR]

Removes this device from the cluster gracefully: it releases the lease if it holds it,
then asks the leader to remove it from the Raft configuration. Stop the node afterwards
(Ctrl-C on ` + "`baton run`" + `). The last voter cannot leave.

Example:
  baton leave --data /tmp/b3
`

func cmdLeave(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("leave", leaveUsage)
	f := c.addAPIFlags(fs)
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := cl.State(cctx)
	if err != nil {
		return f.apiErr(err)
	}
	if st.Lease.HeldByMe || st.Lease.Holder == st.ID {
		if err := cl.Release(cctx); err != nil {
			return fmt.Errorf("release the lease before leaving: %w", err)
		}
		fmt.Fprintln(c.stdout, "released the lease")
	}
	if err := cl.RemoveMember(cctx, st.ID); err != nil {
		// The removal may have been applied even though the answer failed (a device
		// that left is refused by the others at once): trust the configuration.
		if !stillMember(cctx, cl, st.ID) {
			fmt.Fprintf(c.stdout, "%s left the cluster; stop its node now\n", st.ID)
			return nil
		}
		return fmt.Errorf("leave: %w", err)
	}
	fmt.Fprintf(c.stdout, "%s left the cluster; stop its node now\n", st.ID)
	return nil
}

// stillMember reports whether id is in the Raft configuration as the node sees it
// (true when that cannot be read: then the error stands).
func stillMember(ctx context.Context, cl *api.Client, id string) bool {
	ms, err := cl.Members(ctx)
	if err != nil {
		return true
	}
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// ----- status -----

const statusUsage = `Usage: baton status [--data DIR] [--json]

Shows this device, Raft (role, leader, term, indexes), the lease (holder, epoch, expires
in), the chain head, pending intents and the members. Answers even without a quorum.

Examples:
  baton status --data /tmp/b1
  baton status --data /tmp/b1 --json | jq .lease
`

func cmdStatus(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("status", statusUsage)
	f := c.addAPIFlags(fs)
	asJSON := fs.Bool("json", false, "print the state as JSON (GET /v1/state)")
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := cl.State(cctx)
	if err != nil {
		return f.apiErr(err)
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	members, merr := cl.Members(cctx)
	printStatus(c.stdout, st, members, merr)
	return nil
}

func printStatus(w io.Writer, st node.State, members []api.MemberJSON, merr error) {
	me := func(id string) string {
		switch id {
		case "":
			return "none"
		case st.ID:
			return id + " (this device)"
		}
		return id
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	signs := "yes"
	if !st.Signer {
		signs = "no (replica without the chain key)"
	}
	fmt.Fprintf(tw, "device\t%s\n", st.ID)
	fmt.Fprintf(tw, "chain\t%s\n", st.Chain)
	fmt.Fprintf(tw, "can sign\t%s\n", signs)
	contact := "never"
	if st.Raft.LastContactMs >= 0 {
		contact = (time.Duration(st.Raft.LastContactMs) * time.Millisecond).String() + " ago"
	}
	if st.Raft.Role == "Leader" {
		contact = "-"
	}
	fmt.Fprintf(tw, "raft\t%s, term %d, leader %s\n", st.Raft.Role, st.Raft.Term, me(st.Raft.Leader))
	fmt.Fprintf(tw, "raft index\tcommit %d, applied %d, last %d, last contact %s\n", st.Raft.CommitIndex, st.Raft.AppliedIndex, st.Raft.LastIndex, contact)
	switch {
	case st.Lease.Holder == "" && st.Lease.Epoch == 0:
		fmt.Fprintf(tw, "lease\tnever held\n")
	case st.Lease.Holder == "":
		fmt.Fprintf(tw, "lease\treleased (epoch %d): the next claim wins\n", st.Lease.Epoch)
	default:
		exp := time.Duration(st.Lease.ExpiresInMs) * time.Millisecond
		state := "expires in " + exp.String()
		if exp < 0 {
			state = "lapsed " + (-exp).String() + " ago"
		}
		fmt.Fprintf(tw, "lease\t%s, epoch %d, %s (ttl %s)\n", me(st.Lease.Holder), st.Lease.Epoch, state, time.Duration(st.Lease.TTLMs)*time.Millisecond)
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
			age := ""
			if !st.Loop.LastErrorAt.IsZero() {
				age = " (" + time.Since(st.Loop.LastErrorAt).Round(time.Second).String() + " ago)"
			}
			fmt.Fprintf(tw, "last error%s\t%s\n", age, oneLine(st.Loop.LastError))
		}
	}
	if st.SuspectedSkew {
		fmt.Fprintf(tw, "clock\tSUSPECTED SKEW: this device's wall clock disagrees with the lease record (%d reports)\n", st.SkewReports)
	}
	fmt.Fprintf(tw, "members\t%d\n", st.Members)
	tw.Flush()
	if merr != nil {
		fmt.Fprintf(w, "  (members: %v)\n", merr)
		return
	}
	for _, m := range members {
		role := "voter"
		if !m.Voter {
			role = "non-voter"
		}
		if m.Leader {
			role += ", raft leader"
		}
		if m.ID == st.Lease.Holder {
			role += ", lease holder"
		}
		if m.ID == st.ID {
			role += ", this device"
		}
		addr := ""
		if len(m.Addrs) > 0 {
			addr = "  " + m.Addrs[0]
		}
		fmt.Fprintf(w, "  %s  %s%s\n", m.ID, role, addr)
	}
}

// ----- submit -----

const submitUsage = `Usage: baton submit [--data DIR] [--id ID] --path COLLECTION/KEY (--value V | --file F | --del) [--wait signed]

Submits one intent to the node. The id is the idempotency key: submitting the same id
again returns the original result and changes nothing (default: a random id, printed).
--wait committed (default) returns once the intent is in the Raft log (it will be
signed exactly once while a quorum survives); --wait signed returns once the commit that
contains it is applied on this device (prints its seq and hash). --file - reads stdin.

Examples:
  baton submit --data /tmp/b1 --path app.bsky.feed.post/1 --value '{"text":"hi"}'
  baton submit --data /tmp/b1 --id post-2 --path posts/2 --file post.json --wait signed
  baton submit --data /tmp/b1 --path posts/1 --del
`

func cmdSubmit(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("submit", submitUsage)
	f := c.addAPIFlags(fs)
	id := fs.String("id", "", "intent `id` (idempotency key; default random)")
	path := fs.String("path", "", "record `path` collection/key")
	value := fs.String("value", "", "the record's new `value`")
	file := fs.String("file", "", "read the value from `FILE` (- for stdin)")
	del := fs.Bool("del", false, "delete the record")
	wait := fs.String("wait", "committed", "wait until `committed` (in the Raft log) or signed")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usagef("--path is required")
	}
	n := 0
	for _, set := range []bool{*value != "", *file != "", *del} {
		if set {
			n++
		}
	}
	if n != 1 {
		return usagef("give exactly one of --value, --file or --del")
	}
	var w node.Wait
	switch *wait {
	case "committed":
		w = node.WaitCommitted
	case "signed":
		w = node.WaitSigned
	default:
		return usagef("--wait %q: want committed or signed", *wait)
	}
	in := intentlog.Intent{ID: *id, Op: intentlog.OpPut, Path: *path, Value: []byte(*value)}
	switch {
	case *del:
		in.Op, in.Value = intentlog.OpDel, nil
	case *file == "-":
		b, err := io.ReadAll(io.LimitReader(c.stdin, api.MaxRequestBody+1))
		if err != nil {
			return err
		}
		in.Value = b
	case *file != "":
		b, err := readSmall(*file, api.MaxRequestBody)
		if err != nil {
			return err
		}
		in.Value = b
	}
	if in.ID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		in.ID = "cli-" + hex.EncodeToString(b)
	}
	if err := node.ValidateIntent(&in); err != nil {
		return usagef("%v", err)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	timeout := callTimeout
	if w == node.WaitSigned {
		timeout = 2 * callTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := cl.Submit(cctx, in, w)
	if err != nil {
		return f.apiErr(fmt.Errorf("submit %s: %w", in.ID, err))
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(res)
	}
	dup := ""
	if res.Duplicate {
		dup = " (duplicate: the original result)"
	}
	if res.Seq > 0 {
		fmt.Fprintf(c.stdout, "signed id=%s index=%d seq=%d hash=%s%s\n", res.ID, res.Index, res.Seq, res.Hash, dup)
	} else {
		fmt.Fprintf(c.stdout, "committed id=%s index=%d%s\n", res.ID, res.Index, dup)
	}
	return nil
}

// ----- tail and export -----

const tailUsage = `Usage: baton tail [--data DIR] [--from SEQ] [--json]

Follows the chain: one line per commit as this device applies it (seq, epoch, signer,
hash, ops), until Ctrl-C. Starts at the current head, or at --from SEQ. --json prints
the API's NDJSON lines (as ` + "`baton export`" + `).

Examples:
  baton tail --data /tmp/b1
  baton tail --data /tmp/b1 --from 1 --json
`

const exportUsage = `Usage: baton export [--data DIR] [--from SEQ] > chain.ndjson

Writes the applied chain from --from (default 1) to the current head as NDJSON, one
commit a line: {seq, hash (hex), epoch, signer, cbor (base64 of the signed encoding)}.
Check it anywhere with ` + "`baton verify --chain DID chain.ndjson`" + `.

Examples:
  baton export --data /tmp/b1 > chain.ndjson
  baton export --data /tmp/b1 | baton verify --data /tmp/b1
`

func cmdTail(ctx context.Context, c *cli, args []string) error {
	return streamCommits(ctx, c, "tail", tailUsage, args, true)
}

func cmdExport(ctx context.Context, c *cli, args []string) error {
	return streamCommits(ctx, c, "export", exportUsage, args, false)
}

func streamCommits(ctx context.Context, c *cli, name, usage string, args []string, follow bool) error {
	fs := c.flagSet(name, usage)
	f := c.addAPIFlags(fs)
	from := fs.Uint64("from", 0, "first `seq` (tail: default the current head; export: default 1)")
	asJSON := &[]bool{true}[0]
	if follow {
		asJSON = fs.Bool("json", false, "print NDJSON lines instead of text")
	}
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	start := *from
	if follow && start == 0 {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		st, err := cl.State(cctx)
		cancel()
		if err != nil {
			return f.apiErr(err)
		}
		start = max(st.Head.Seq, 1)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	enc := json.NewEncoder(c.stdout)
	n := 0
	for ac := range cl.Commits(sctx, start, follow) {
		if ac.Err != nil {
			return f.apiErr(ac.Err)
		}
		n++
		if *asJSON {
			if err := enc.Encode(api.CommitJSON{Seq: ac.Seq, Hash: hex.EncodeToString(ac.Hash[:]), Epoch: ac.Epoch, Signer: ac.Signer, CBOR: ac.Raw}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(c.stdout, commitLine(ac))
	}
	if ctx.Err() != nil && follow {
		return nil // Ctrl-C ends a tail normally
	}
	if !follow && n == 0 && *from <= 1 {
		fmt.Fprintln(c.stderr, "(the chain is empty)")
	}
	return ctx.Err()
}

func commitLine(ac signer.AppliedCommit) string {
	c, err := chain.Decode(ac.Raw)
	if err != nil {
		return fmt.Sprintf("seq %d  UNDECODABLE: %v", ac.Seq, err)
	}
	var paths []string
	for i, op := range c.Ops {
		if i == 3 {
			paths = append(paths, fmt.Sprintf("+%d more", len(c.Ops)-3))
			break
		}
		paths = append(paths, op.Kind.String()+" "+op.Path)
	}
	return fmt.Sprintf("%s  seq %-6d epoch %-3d signer %s  hash %x  %d ops: %s",
		time.UnixMilli(c.Time).Format("15:04:05.000"), c.Seq, c.Epoch, shortPeer(c.Signer), ac.Hash[:6], len(c.Ops), strings.Join(paths, ", "))
}

// ----- lease -----

const leaseUsage = `Usage: baton lease release|transfer|steal|history [flags]

  baton lease release                      the holder gives the lease up; a standby claims it at once
  baton lease transfer --to PEER           the holder hands it to member PEER (one Raft entry)
  baton lease steal --reason TEXT          operator override for a wedged holder: this device
                                           takes the lease by force (epoch+1); prints the prior
                                           holder; the reason goes into the lease history
  baton lease history [--json]             the lease's audit trail, oldest first

release and transfer are asked of the holder's node (--data of the holder).

Examples:
  baton lease transfer --data /tmp/b1 --to 12D3KooW...
  baton lease steal --data /tmp/b2 --reason "b1 hung, kernel panic"
`

func cmdLease(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 {
		return usagef("want a subcommand: release, transfer, steal or history")
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "--help" || sub == "-help" {
		c.flagSet("lease", leaseUsage).Usage()
		return flag.ErrHelp
	}
	fs := c.flagSet("lease "+sub, leaseUsage)
	f := c.addAPIFlags(fs)
	var to, reason *string
	var asJSON *bool
	switch sub {
	case "release":
	case "transfer":
		to = fs.String("to", "", "peer ID of the member to hand the lease to")
	case "steal":
		reason = fs.String("reason", "", "why (recorded in the lease history)")
	case "history":
		asJSON = fs.Bool("json", false, "print JSON")
	default:
		return usagef("unknown lease subcommand %q: want release, transfer, steal or history", sub)
	}
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	if to != nil && *to == "" {
		return usagef("--to PEER is required")
	}
	if reason != nil && strings.TrimSpace(*reason) == "" {
		return usagef("--reason TEXT is required: say why you override the holder")
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch sub {
	case "release":
		if err := cl.Release(cctx); err != nil {
			return f.apiErr(err)
		}
		fmt.Fprintln(c.stdout, "released")
	case "transfer":
		if err := cl.Transfer(cctx, *to); err != nil {
			return f.apiErr(err)
		}
		fmt.Fprintf(c.stdout, "transferred to %s\n", *to)
	case "steal":
		before, err := cl.State(cctx)
		if err != nil {
			return f.apiErr(err)
		}
		if err := cl.Steal(cctx, *reason); err != nil {
			return f.apiErr(err)
		}
		prior := before.Lease.Holder
		if h, err := cl.LeaseHistory(cctx); err == nil {
			for i := len(h) - 1; i >= 0; i-- {
				if h[i].Event == "steal" && h[i].Holder == before.ID {
					prior = h[i].Prior
					fmt.Fprintf(c.stdout, "stole the lease at epoch %d; prior holder: %s\n", h[i].Epoch, orNone(prior))
					return nil
				}
			}
		}
		fmt.Fprintf(c.stdout, "stole the lease; prior holder: %s\n", orNone(prior))
	case "history":
		h, err := cl.LeaseHistory(cctx)
		if err != nil {
			return f.apiErr(err)
		}
		if *asJSON {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(h)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "INDEX\tTIME\tEVENT\tEPOCH\tHOLDER\tPRIOR\tREASON")
		for _, e := range h {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Index, time.UnixMilli(e.TS).Format("2006-01-02 15:04:05.000"), e.Event, e.Epoch, orNone(e.Holder), e.Prior, e.Reason)
		}
		return tw.Flush()
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var _ = os.Stdout
