package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
)

// apiFlags are the flags of the commands that talk to a running node.
type apiFlags struct {
	data      *string
	api       *string
	tokenFile *string
	timeout   *time.Duration // nil for streams without a deadline
	getenv    func(string) string
}

// addAPIFlags adds --data, --api, --api-token-file and, when timeout > 0, --timeout.
func (c *cli) addAPIFlags(fs *pflag.FlagSet, timeout time.Duration, what string) *apiFlags {
	f := &apiFlags{
		data:      dataFlag(fs),
		api:       fs.String("api", "", "the node's API: a Unix socket `path` or http://host:port (default DIR/baton.sock)"),
		tokenFile: fs.String("api-token-file", "", "with a TCP --api: the bearer token `file` (default DIR/api.token; or set BATON_API_TOKEN)"),
		getenv:    c.getenv,
	}
	if timeout > 0 {
		f.timeout = fs.Duration("timeout", timeout, "give up "+what+" after this long")
	}
	return f
}

// target is the API the command talks to: --api as given, a data dir given as --api
// is its socket, and host:port without a scheme is http://host:port; else DIR's socket.
func (f *apiFlags) target() string {
	a := *f.api
	switch {
	case a == "":
		return filepath.Join(*f.data, api.SocketFile)
	case strings.Contains(a, "://"):
		return a
	case isDir(a):
		return filepath.Join(a, api.SocketFile)
	case !strings.Contains(a, "/") && strings.Contains(a, ":"):
		if _, _, err := net.SplitHostPort(a); err == nil {
			return "http://" + a
		}
	}
	return a
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// client connects to the node's API; a bad --api value is a usage error.
func (f *apiFlags) client() (*api.Client, error) {
	if f.timeout != nil && *f.timeout <= 0 {
		return nil, usagef("--timeout must be positive")
	}
	tok, err := f.token()
	if err != nil {
		return nil, err
	}
	cl, err := api.NewClient(f.target(), tok)
	if err != nil {
		return nil, usagef("--api: %v", api.Message(err))
	}
	return cl, nil
}

// ctx bounds one command's calls by --timeout.
func (f *apiFlags) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.timeout == nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, *f.timeout)
}

// open connects and bounds the command's calls by --timeout; done closes both.
func (f *apiFlags) open(ctx context.Context) (*api.Client, context.Context, func(), error) {
	cl, err := f.client()
	if err != nil {
		return nil, nil, nil, err
	}
	cctx, cancel := f.ctx(ctx)
	return cl, cctx, func() { cancel(); cl.Close() }, nil
}

// state is open, then the node's state (the first thing most commands read).
func (f *apiFlags) state(ctx context.Context) (*api.Client, node.State, context.Context, func(), error) {
	cl, cctx, done, err := f.open(ctx)
	if err != nil {
		return nil, node.State{}, nil, nil, err
	}
	st, err := cl.State(cctx)
	if err != nil {
		done()
		return nil, node.State{}, nil, nil, f.apiErr(err)
	}
	return cl, st, cctx, done, nil
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

// apiErr turns "no node listening" into advice and a deadline into --timeout advice;
// other errors pass through (describe cleans them for printing).
func (f *apiFlags) apiErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		if r, ok, _ := device.ReadRemoved(*f.data); ok && *f.api == "" {
			return fmt.Errorf("no node is running on %s: %s", f.target(), api.Message(device.RemovedError(*f.data, r)))
		}
		if *f.api != "" {
			tried := f.target()
			if tried != *f.api {
				tried += " (from --api " + *f.api + ")"
			}
			return fmt.Errorf("no node answers at %s: %s", tried, api.Message(err))
		}
		return fmt.Errorf("no node is running on %s (start one with `baton run --data %s`; another data dir: --data DIR or BATON_DATA; a TCP API: --api host:port)", f.target(), *f.data)
	}
	if f.timeout != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within --timeout %s", *f.timeout)
	}
	return err
}

// describe is err's one-line text: API errors without their code and with their
// repeated prefixes removed; advice for the codes operators meet most.
func describe(err error) string {
	var ae *api.APIError
	if !errors.As(err, &ae) {
		return api.Message(err)
	}
	prefix := ""
	if s := err.Error(); s != ae.Error() {
		prefix = strings.TrimSuffix(s, ae.Error())
	}
	msg := api.Message(ae)
	if ae.Code == api.CodeNoQuorum {
		msg += " (no Raft leader reachable: `baton status` shows which members are unreachable)"
	}
	return prefix + msg
}

// ----- invite -----

const inviteLong = `Asks the node running on DIR to open a join window and prints a one-line invite (to
stdout; notes go to stderr). Give the invite to the new device out of band, as a file
or through a pipe; there run ` + "`baton join --data DIR2 --invite-file FILE`" + `. The invite
carries the network key, the member addresses, a join token valid for --valid-for and
for one device (each invite is independent: a second leaves the first valid, until the
node restarts), and, with --with-chain-key, the chain key:
the new device can then sign. Treat an invite like a password.`

const inviteExample = `  baton invite --data /tmp/b1 --with-chain-key > invite.txt
  baton join --data /tmp/b2 --listen /ip4/127.0.0.1/tcp/7402 --invite-file invite.txt`

func (c *cli) inviteCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "invite [--with-chain-key] [--valid-for 1h]", Short: "print a one-line invite for a new device (asks the running node)",
		Long: inviteLong, Example: inviteExample, Args: noArgs}
	fs := cmd.Flags()
	f := c.addAPIFlags(fs, 10*time.Second, "waiting for the node")
	validFor := fs.Duration("valid-for", time.Hour, "how long the invite's join token stays valid")
	// --ttl was the flag's name; it stays as an alias but is not read from BATON_TTL,
	// which is the lease TTL of `baton run` (a service's environment file sets it).
	ttl := fs.Duration("ttl", 0, "")
	_ = fs.MarkDeprecated("ttl", "use --valid-for (BATON_TTL is run's lease TTL)")
	noEnv(fs, "ttl")
	withKey := fs.Bool("with-chain-key", false, "include the chain key (the new device can sign)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if fs.Changed("ttl") {
			if fs.Changed("valid-for") {
				return usagef("--ttl is the old name of --valid-for: give one")
			}
			*validFor = *ttl
		}
		if *validFor < time.Minute || *validFor > api.MaxJoinWindowOpen {
			return usagef("--valid-for must be between 1m and %s", api.MaxJoinWindowOpen)
		}
		d, err := device.Open(*f.data)
		if err != nil {
			return err
		}
		if *withKey && d.AnyKey == nil {
			return fmt.Errorf("%s has no chain key to share (a replica)", *f.data)
		}
		token, err := device.NewJoinToken()
		if err != nil {
			return err
		}
		cl, cctx, done, err := f.open(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		until := time.Now().Add(*validFor).Truncate(time.Second)
		w, err := cl.AllowJoin(cctx, token, until)
		if err != nil {
			return f.apiErr(err)
		}
		if w.Chain != d.Chain {
			return fmt.Errorf("the node on %s serves %s, but %s holds keys of %s", f.target(), w.Chain, *f.data, d.Chain)
		}
		if len(w.Addrs) == 0 {
			return errors.New("the node reports no listen addresses")
		}
		inv, err := device.NewInvite(d, w.Addrs, token, until, *withKey)
		if err != nil {
			return err
		}
		s, err := inv.Encode()
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, s)
		if *withKey {
			fmt.Fprintln(c.stderr, "warning: this invite contains the chain key: anyone holding it can sign as this chain. Share it only over a channel you trust.")
		} else {
			fmt.Fprintln(c.stderr, "note: without --with-chain-key the new device replicates and verifies but never signs.")
		}
		fmt.Fprintf(c.stderr, "valid until %s for one device (join window on %s)\n", until.Format(time.RFC3339), shortPeer(w.ID))
		return nil
	}
	return cmd
}

// ----- leave and members -----

const leaveLong = `Removes this device from the cluster gracefully: it releases the lease if it holds it,
then asks the leader to remove it from the Raft configuration. The node then stops by
itself (` + "`baton run`" + ` exits saying so), and its data dir does not run again. The last
voter cannot leave. To remove another device (a dead one, say), use
` + "`baton members remove ID`" + ` on any member.`

func (c *cli) leaveCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "leave [--data DIR]", Short: "remove this device from the cluster and stop its node",
		Long: leaveLong, Example: "  baton leave --data /tmp/b3", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 20*time.Second, "waiting for the cluster")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cl, st, cctx, done, err := f.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		if st.Lease.HeldByMe {
			if err := cl.Release(cctx); err != nil {
				return fmt.Errorf("release the lease before leaving: %w", f.apiErr(err))
			}
			fmt.Fprintln(c.stdout, "released the lease")
		}
		if err := cl.RemoveMember(cctx, st.ID); err != nil {
			// The removal may have been applied even though the answer failed (a device
			// that left is refused by the others at once, and its node stops): trust
			// the configuration, or the node's record of it.
			if _, gone, _ := device.ReadRemoved(*f.data); !gone && stillMember(cctx, cl, st.ID) {
				return f.apiErr(err)
			}
		}
		fmt.Fprintf(c.stdout, "%s left the cluster; its node stops now\n", st.ID)
		return nil
	}
	return cmd
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

const membersLong = `Lists the members of the Raft configuration as this device sees them (with their
reachability), or removes one. ID may be a full peer ID or an unambiguous part of one:
a prefix (12D3KooWAb) or the …aN1816 suffix other commands print. Removing this device
is ` + "`baton leave`" + `; removing another is for a device that is gone for good (a dead disk)
or that must be shut out: the others refuse it at once. The last voter cannot be
removed.`

const membersExample = `  baton members --data /tmp/b1
  baton members remove --data /tmp/b1 …aN1816
  baton members promote --data /tmp/b1 …x7Qk2e      # a non-voter (join --nonvoter) votes from now on
  baton members move-leader --data /tmp/b1 …aN1816  # the Raft leader, where writes are ordered`

func (c *cli) membersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "members [list | remove ID | promote ID | move-leader ID]", Short: "list the members, remove or promote one, move Raft leadership",
		Long: membersLong, Example: membersExample, Args: noArgs}
	list := &cobra.Command{Use: "list [--json]", Short: "list the members and their reachability", Args: noArgs}
	lf := c.addAPIFlags(list.Flags(), 10*time.Second, "waiting for the node")
	asJSON := list.Flags().Bool("json", false, "print JSON (GET /v1/peers)")
	runList := func(cmd *cobra.Command, args []string) error {
		_, st, _, done, err := lf.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		if *asJSON {
			return printJSON(c.stdout, map[string]any{"peers": st.Peers, "quorum": st.Quorum, "removed": st.RemovedMembers})
		}
		printPeers(c.stdout, st, "")
		return nil
	}
	list.RunE = runList
	// `baton members` alone lists: the list command's flags are the group's too.
	cmd.Flags().AddFlagSet(list.Flags())
	cmd.RunE = runList

	remove := c.memberOp("remove ID", "remove another member from the cluster",
		func(ctx context.Context, cl *api.Client, st node.State, id string) (string, error) {
			if id == st.ID {
				return "", usagef("%s is this device: use `baton leave` (it also stops the node)", shortPeer(id))
			}
			return "removed %s (%s) from the cluster\n", cl.RemoveMember(ctx, id)
		})
	promote := c.memberOp("promote ID", "make a non-voter a voter (it then counts for the quorum)",
		func(ctx context.Context, cl *api.Client, _ node.State, id string) (string, error) {
			return "promoted %s (%s) to voter\n", cl.Promote(ctx, id)
		})
	lead := c.memberOp("move-leader ID", "hand Raft leadership to a voter (the lease holder is another matter: `baton lease transfer`)",
		func(ctx context.Context, cl *api.Client, _ node.State, id string) (string, error) {
			return "Raft leadership moved to %s (%s)\n", cl.MoveLeader(ctx, id)
		})
	cmd.AddCommand(list, remove, promote, lead)
	return cmd
}

// memberOp is a members subcommand that takes one member (ID, or a unique prefix or
// suffix) and calls op on it; op returns the success line's format (short ID, ID).
func (c *cli) memberOp(use, short string, op func(context.Context, *api.Client, node.State, string) (string, error)) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want exactly one member ID, got %d", len(args))
			}
			return nil
		}}
	f := c.addAPIFlags(cmd.Flags(), 20*time.Second, "waiting for the cluster")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cl, st, cctx, done, err := f.state(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		id, err := resolvePeer(st, args[0], "ID")
		if err != nil {
			return err
		}
		line, err := op(cctx, cl, st, id)
		var ue *usageError
		if errors.As(err, &ue) {
			return err
		}
		if err != nil {
			return f.apiErr(err)
		}
		fmt.Fprintf(c.stdout, line, shortPeer(id), id)
		return nil
	}
	cmd.ValidArgsFunction = c.completePeers(f)
	return cmd
}

// resolvePeer finds the member named by s: a full peer ID, a unique prefix, or a
// unique suffix (with or without a leading … or ...). flag names the argument in
// errors.
func resolvePeer(st node.State, s, flag string) (string, error) {
	s = strings.TrimSpace(s)
	suffix := false
	for _, p := range []string{"…", "..."} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			s, suffix = rest, true
		}
	}
	if s == "" {
		return "", usagef("%s is empty", flag)
	}
	ids := map[string]bool{}
	for _, p := range st.Peers {
		ids[p.ID] = true
	}
	if len(ids) == 0 {
		ids[st.ID] = true
	}
	var match []string
	for id := range ids {
		if id == s {
			return id, nil
		}
		if (!suffix && strings.HasPrefix(id, s)) || strings.HasSuffix(id, s) {
			match = append(match, id)
		}
	}
	sort.Strings(match)
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return "", usagef("%s %q: no member matches (`baton members` lists them)", flag, s)
	}
	var short []string
	for _, m := range match {
		short = append(short, m)
	}
	return "", usagef("%s %q is ambiguous: it matches %s; give more characters", flag, s, strings.Join(short, ", "))
}

// completePeers completes member IDs by asking the node (for shells).
func (c *cli) completePeers(f *apiFlags) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		cl, err := f.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := cl.State(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, p := range st.Peers {
			if strings.HasPrefix(p.ID, toComplete) {
				out = append(out, p.ID)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// shortPeerID is the …XXXXXX form (demo.go's shortPeer).
var _ = shortPeer

// newJoinToken is device.NewJoinToken (demo.go opens join windows with it).
func newJoinToken() ([]byte, error) { return device.NewJoinToken() }
