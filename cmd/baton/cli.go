package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
)

// cli is one invocation of the binary: its streams and environment. Tests build one
// with their own buffers and getenv instead of touching the process's.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// command is a subcommand. run parses its own flags with c.parse.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// commands lists the subcommands in the order `baton help` shows them.
var commands []command

func init() {
	commands = []command{
		{"init", "create this device's keys in a data dir (a new chain, or from an invite)", cmdInit},
		{"run", "run the node in the foreground", cmdRun},
		{"invite", "print a one-line invite for a new device (asks the running node)", cmdInvite},
		{"join", "run the node, joining a cluster with an invite on first start", cmdJoin},
		{"leave", "remove this device from the cluster (gracefully)", cmdLeave},
		{"status", "show this device, Raft, the lease, the chain head and members", cmdStatus},
		{"submit", "submit one intent (put or delete a record)", cmdSubmit},
		{"tail", "follow commits as they are applied, one line each", cmdTail},
		{"export", "write the chain as NDJSON (verify it with `baton verify`)", cmdExport},
		{"verify", "verify an exported chain", cmdVerify},
		{"lease", "release, transfer or steal the lease; show its history", cmdLease},
		{"demo", "three devices in one process: watch a failover", cmdDemo},
		{"drill", "run a failover drill (testnet)", cmdDrill},
		{"bench", "run benchmarks (testnet/bench)", cmdBench},
		{"sim", "simulate: seeded fault schedules in virtual time (testnet/sim)", cmdSim},
		{"version", "print the version", cmdVersion},
	}
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

func (c *cli) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		c.help(c.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if cmd, ok := lookup(args[1]); ok {
				return c.exit(cmd.name, cmd.run(ctx, c, []string{"--help"}))
			}
			fmt.Fprintf(c.stderr, "baton: unknown command %q (see `baton help`)\n", args[1])
			return 2
		}
		c.help(c.stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(c.stderr, "baton: unknown command %q (see `baton help`)\n", name)
		return 2
	}
	return c.exit(cmd.name, cmd.run(ctx, c, args[1:]))
}

func lookup(name string) (command, bool) {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

// exit maps a subcommand's error to an exit status and prints it as one line.
func (c *cli) exit(name string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "baton %s: %s (see `baton %s --help`)\n", name, ue.msg, name)
		return 2
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(c.stderr, "baton %s: %s\n", name, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(c.stderr, "baton %s: %s\n", name, oneLine(err.Error()))
	return 1
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func (c *cli) help(w io.Writer) {
	fmt.Fprint(w, `baton elects one signer among a few devices and extends one signed chain that never forks.

Usage: baton <command> [flags] [args]

Commands:
`)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
Every flag can also be set in the environment as BATON_<FLAG> (dashes become
underscores, e.g. BATON_DATA, BATON_API_TOKEN); a flag on the command line wins.
The data dir defaults to ~/.baton.

Start here:
  baton demo                     three devices on this machine, a failover, a summary
  baton help <command>           flags and examples of one command
`)
}

// flagSet returns a FlagSet for a subcommand whose --help prints usage (the synopsis
// and examples) followed by the flags.
func (c *cli) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, by exit
	fs.Usage = func() {
		w := c.stdout
		fmt.Fprintln(w, strings.TrimSpace(usage))
		has := false
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprintln(w, "\nFlags (each also as BATON_<FLAG>):")
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return fs
}

// envName is the environment variable of a flag: BATON_ and the name in upper case with
// dashes as underscores.
func envName(flagName string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse applies BATON_<FLAG> environment variables, then the command line (which wins).
// --help prints usage and returns flag.ErrHelp; any other problem is a usageError.
func (c *cli) parse(fs *flag.FlagSet, args []string) error {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	for _, n := range names {
		if v, ok := c.lookupEnv(envName(n)); ok {
			if err := fs.Set(n, v); err != nil {
				return usagef("%s=%q: %v", envName(n), v, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return flag.ErrHelp
		}
		return usagef("%v", err)
	}
	return nil
}

func (c *cli) lookupEnv(name string) (string, bool) {
	v := c.getenv(name)
	return v, v != ""
}

// defaultDataDir is ~/.baton (BATON_DATA overrides it through the usual env rule).
func defaultDataDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ".baton"
	}
	return filepath.Join(home, ".baton")
}

func dataFlag(fs *flag.FlagSet) *string {
	return fs.String("data", defaultDataDir(), "data `dir` of this device (keys, Raft, state, baton.sock)")
}

// noArgs refuses positional arguments a command does not take.
// parseNoArgs parses a command's flags and refuses positional arguments.
func (c *cli) parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := c.parse(fs, args); err != nil {
		return err
	}
	return noArgs(fs)
}

func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// version is the module version of the binary, or "(devel)" with the VCS revision.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev + dirty
	}
	return v + " " + bi.GoVersion
}

func cmdVersion(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("version", `Usage: baton version

Prints the version of this binary (module version, VCS revision, Go version).`)
	if err := c.parseNoArgs(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "baton", version())
	return nil
}
