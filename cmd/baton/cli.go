package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/signer/device"
)

// The command line is built with spf13/cobra and spf13/pflag: GNU-style --flags that
// may follow arguments, help printed once (`baton help CMD`, `baton CMD --help`),
// shell completion for bash, zsh and fish generated from the same definitions as the
// help and the man page (`baton completion`, `baton man`). On top of it this file
// keeps baton's rules: every flag can also come from BATON_<FLAG>, a usage mistake is
// one line on stderr and exit status 2, any other failure one line and status 1.

// cli is one invocation of the binary: its streams and environment. Tests build one
// with their own buffers and getenv instead of touching the process's.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError carries a specific exit status with its message ("" prints nothing more).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// run is the whole program: it returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return c.main(ctx, args)
}

const rootLong = `baton elects one signer among a few devices and extends one signed chain that never forks.

Every flag can also be set in the environment as BATON_<FLAG> (dashes become
underscores, e.g. BATON_DATA, BATON_LISTEN); a flag on the command line wins.
BATON_API_TOKEN gives the bearer token of a TCP --api (secrets never go in argv).
The data dir defaults to ~/.baton; as root without one, to /var/lib/baton/data when
the packaged service's device is there (so ` + "`baton status`" + ` beside the service finds its
node). --api takes a socket path, a data dir, host:port or http://host:port. Usage
errors exit 2, other failures 1, a removed device's run 3 (baton man: EXIT STATUS).`

const rootExample = `  baton demo                       three devices on this machine, a failover, a summary
  baton init --new-chain           the first device of a new chain
  baton help <command>             flags and examples of one command`

// root builds the command tree.
func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "baton",
		Short:         "elect one signer among a few devices; extend one signed chain",
		Long:          rootLong,
		Example:       rootExample,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version(),
		// `baton` alone prints the usage to stderr and exits 2 (see main).
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(c.stderr)
			_ = cmd.Usage()
			return &exitError{code: 2}
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := c.applyEnv(cmd); err != nil {
				return err
			}
			return applyOutput(cmd)
		},
	}
	root.PersistentFlags().StringP("output", "o", "table", "output `format`: table (for people) or json (for scripts: the same as the command's --json)")
	noEnv(root.PersistentFlags(), "output") // BATON_OUTPUT would reach `run`, which has no JSON
	root.SetVersionTemplate("baton {{.Version}}\n")
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// -data (one dash, as Go's flag package allowed) reads as the shorthands d, a, ...
		if _, after, ok := strings.Cut(err.Error(), "unknown shorthand flag: "); ok {
			if _, arg, ok := strings.Cut(after, " in "); ok && len(arg) > 2 && !strings.HasPrefix(arg, "--") {
				return usagef("unknown flag %s: long flags take two dashes (-%s)", arg, arg)
			}
		}
		return usagef("%v", err)
	})
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddGroup(&cobra.Group{ID: "device", Title: "Set up and run a device:"},
		&cobra.Group{ID: "ops", Title: "Operate a running device:"},
		&cobra.Group{ID: "tools", Title: "Check, try and test:"})
	for _, sub := range []*cobra.Command{
		c.initCmd(), c.runCmd(), c.joinCmd(), c.inviteCmd(), c.leaveCmd(), c.membersCmd(), c.backupCmd(), c.restoreCmd(),
	} {
		sub.GroupID = "device"
		root.AddCommand(sub)
	}
	for _, sub := range []*cobra.Command{
		c.statusCmd(), c.healthCmd(), c.submitCmd(), c.tailCmd(), c.exportCmd(), c.leaseCmd(), c.watchCmd(), c.execCmd(),
	} {
		sub.GroupID = "ops"
		root.AddCommand(sub)
	}
	for _, sub := range []*cobra.Command{
		c.verifyCmd(), c.repairCmd(), c.passthrough("demo", "three devices in one process: watch a failover", cmdDemo),
		c.passthrough("drill", "run a failover drill (testnet)", cmdDrill),
		c.passthrough("bench", "run benchmarks (testnet/bench)", cmdBench),
		c.passthrough("sim", "simulate: seeded fault schedules in virtual time (testnet/sim)", cmdSim),
		c.versionCmd(), c.manCmd(),
	} {
		sub.GroupID = "tools"
		root.AddCommand(sub)
	}
	root.SetHelpCommandGroupID("tools")
	root.SetCompletionCommandGroupID("tools")
	root.InitDefaultCompletionCmd()
	requireSubcommands(root)
	return root
}

// requireSubcommands makes every group command (completion, lease, members: those
// without their own action) refuse an unknown or missing subcommand with a usage
// error, instead of printing its help and exiting 0.
func requireSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		requireSubcommands(sub)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		var names []string
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		want := strings.Join(names, ", ")
		cmd.Args = func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("want a subcommand: %s", want)
			}
			return usagef("unknown subcommand %q: want %s", args[0], want)
		}
		cmd.RunE = func(*cobra.Command, []string) error { return nil }
	}
}

// passthrough is a command that parses its own arguments (demo with c.flagSet;
// drill, bench and sim in testnet, which print their own help).
func (c *cli) passthrough(name, short string, fn func(context.Context, *cli, []string) error) *cobra.Command {
	return &cobra.Command{
		Use:                name + " [flags]",
		Short:              short,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			err := fn(ctx, c, args)
			if errors.Is(err, pflag.ErrHelp) {
				return nil // the command printed its help; cobra would print its own after it
			}
			return err
		},
	}
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usagef("%s", msg)
}

func (c *cli) main(ctx context.Context, args []string) int {
	root := c.root()
	if len(args) == 0 {
		_ = root.RunE(root, nil)
		return 2
	}
	if args[0] == "help" && len(args) > 1 {
		cmd, _, err := root.Find(args[1:])
		if err != nil || cmd == root {
			fmt.Fprintf(c.stderr, "baton: unknown command %q (see `baton help`)\n", strings.Join(args[1:], " "))
			return 2
		}
		if cmd.DisableFlagParsing { // demo, drill, bench and sim print their own help
			return c.exit(cmd, cmd.RunE(cmd, []string{"--help"}))
		}
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return c.exit(cmd, err)
}

// exit maps a command's error to an exit status and prints it as one line.
func (c *cli) exit(cmd *cobra.Command, err error) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	name := "baton"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(c.stderr, "%s: %s\n", name, ee.msg)
		}
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintf(c.stderr, "%s: %s (see `%s --help`)\n", name, oneLine(err.Error()), name)
		return 2
	}
	fmt.Fprintf(c.stderr, "%s: %s\n", name, oneLine(describe(err)))
	return 1
}

// isCobraUsage recognises the few usage errors cobra makes itself (it has no
// sentinel for them).
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command ") || strings.HasPrefix(s, "required flag") ||
		strings.HasPrefix(s, "invalid argument ") || strings.HasPrefix(s, "if any flags in the group")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// envName is the environment variable of a flag: BATON_ and the name in upper case with
// dashes as underscores.
func envName(flagName string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets the flags not given on the command line from BATON_<FLAG>.
func (c *cli) applyEnv(cmd *cobra.Command) error {
	if cmd.DisableFlagParsing {
		return nil
	}
	return c.envInto(cmd.Flags())
}

// applyOutput maps -o json to the command's --json, and refuses it on a command that
// has no JSON form (one place for the rule, rather than a second flag per command).
func applyOutput(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("output")
	if f == nil {
		return nil
	}
	switch f.Value.String() {
	case "table", "text", "":
		return nil
	case "json":
	default:
		return usagef("-o %s: want table or json", f.Value.String())
	}
	j := cmd.Flags().Lookup("json")
	if j == nil {
		return usagef("-o json: `%s` has no JSON output (commands with one: status, health, members, submit, tail, watch, lease history)", cmd.CommandPath())
	}
	return cmd.Flags().Set("json", "true")
}

// noEnv marks flag name of fs as one BATON_<FLAG> does not set (an old name whose
// variable means something else to another command).
func noEnv(fs *pflag.FlagSet, name string) {
	_ = fs.SetAnnotation(name, noEnvAnnotation, []string{"true"})
}

const noEnvAnnotation = "baton_noenv"

func (c *cli) envInto(fs *pflag.FlagSet) error {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Changed && f.Name != "help" && f.Annotations[noEnvAnnotation] == nil {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	for _, n := range names {
		if v, ok := c.lookupEnv(envName(n)); ok {
			if err := fs.Set(n, v); err != nil {
				return usagef("%s=%q: %v", envName(n), v, err)
			}
		}
	}
	return nil
}

func (c *cli) lookupEnv(name string) (string, bool) {
	v := c.getenv(name)
	return v, v != ""
}

// flagSet returns a FlagSet for a command that parses its own arguments (demo):
// --help prints usage (the synopsis and examples) followed by the flags.
func (c *cli) flagSet(name, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("baton "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, by exit
	fs.Usage = func() {
		fmt.Fprintln(c.stdout, strings.TrimSpace(usage))
		if u := fs.FlagUsages(); u != "" {
			fmt.Fprintf(c.stdout, "\nFlags (each also as BATON_<FLAG>):\n%s", u)
		}
	}
	return fs
}

// parse applies BATON_<FLAG> environment variables, then the command line (which
// wins). --help prints usage (pflag calls fs.Usage) and returns pflag.ErrHelp; any other problem is a
// usageError.
func (c *cli) parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) { // pflag printed the usage already
			return pflag.ErrHelp
		}
		return usagef("%v", err)
	}
	return c.envInto(fs)
}

// parseNoArgs parses a command's flags and refuses positional arguments.
func (c *cli) parseNoArgs(fs *pflag.FlagSet, args []string) error {
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// noArgs refuses positional arguments (cobra.Args with baton's one-line message).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// ServiceDataDir is the data dir of the packaged service (deploy/systemd): a
// subdirectory of its state directory /var/lib/baton, which the baton user owns, so
// that the mark beside it (/var/lib/baton/data.mark) can be written.
const ServiceDataDir = "/var/lib/baton/data"

// defaultDataDir is ~/.baton (BATON_DATA overrides it through the usual env rule).
// As root, when ~/.baton does not exist and the packaged service's data dir holds a
// device, it is that dir: `baton status` beside the service finds its node.
func defaultDataDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ".baton"
	}
	d := filepath.Join(home, ".baton")
	if os.Geteuid() == 0 && !exists(d) && exists(filepath.Join(ServiceDataDir, device.DeviceFile)) {
		return ServiceDataDir
	}
	return d
}

// dataFlag adds --data; the help shows its default as ~/.baton on every machine.
func dataFlag(fs *pflag.FlagSet) *string {
	p := fs.String("data", defaultDataDir(), "data `dir` of this device (keys, Raft, state, baton.sock)")
	fs.Lookup("data").DefValue = "~/.baton; as root without one: " + ServiceDataDir
	return p
}

// buildInfo is the module version, VCS revision and Go version of the binary.
type buildInfo struct {
	Version   string // module version, or "(devel)"
	Revision  string // VCS revision (12 hex digits), "" when not stamped
	Modified  bool   // built from a checkout with local changes
	GoVersion string
}

// revision may be set at link time (-ldflags "-X main.revision=...") for builds
// without VCS stamping (go build -buildvcs=false, or a source tarball).
var revision string

// releaseVersion is set at link time by the release build (tools/release:
// -ldflags "-X main.releaseVersion=v1.2.3"): a binary built in the module's own
// checkout otherwise has the module version (devel), or a pseudo-version.
var releaseVersion string

func readBuildInfo() buildInfo {
	out := buildInfo{Version: "(devel)", Revision: revision}
	if bi, ok := debug.ReadBuildInfo(); ok {
		out.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" {
			out.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				out.Revision = s.Value
			case "vcs.modified":
				out.Modified = s.Value == "true"
			}
		}
	}
	if releaseVersion != "" {
		out.Version = releaseVersion
	}
	if len(out.Revision) > 12 {
		out.Revision = out.Revision[:12]
	}
	return out
}

// version is "VERSION [REVISION[+dirty]] GOVERSION".
func version() string {
	bi := readBuildInfo()
	v := bi.Version
	if bi.Revision != "" {
		v += " " + bi.Revision
		if bi.Modified {
			v += "+dirty"
		}
	}
	if bi.GoVersion != "" {
		v += " " + bi.GoVersion
	}
	return v
}

func (c *cli) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version (module version, VCS revision, Go version)",
		Long: `Prints the version of this binary: the module version (the release's, like v1.2.3, in
a release archive or package; (devel) when built from a checkout), the VCS revision it
was built from when the build stamped it (go build does in a git checkout;
-buildvcs=false or GOFLAGS=-buildvcs=false turns it off; a release build names it), and
the Go version.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(c.stdout, "baton", version())
			return nil
		},
	}
}
