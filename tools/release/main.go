// Command release builds baton's release by one command: versioned archives for Linux
// and macOS (amd64, arm64), .deb and .rpm packages for Linux, and their SHA256SUMS.
//
//	cd tools/release && go run . --version v1.2.3 --out ../../dist
//	cd tools/release && go run . --version v1.2.3 --out ../../dist --targets linux/amd64
//
// It is a module of its own (tools/release/go.mod) so that nfpm, the packager it uses
// as a library, stays out of baton's go.mod. It does not import baton: it runs
// `go build` in the repository's root (found upward from the working directory, or
// --repo) for each target, with CGO_ENABLED=0, -trimpath, -buildvcs=false and
// -ldflags setting main.releaseVersion (the --version) and main.revision (git HEAD),
// then runs the binary built for this machine for the manual pages (`baton man`) and
// the bash, zsh and fish completion (`baton completion`).
//
// In --out it writes, for each target:
//
//   - baton_1.2.3_OS_ARCH.tar.gz: a directory baton_1.2.3_OS_ARCH/ holding baton,
//     LICENSE, README.md, man/man1/*.1, completions/ (baton.bash, _baton, baton.fish),
//     deploy/systemd/baton.service and deploy/launchd/org.batonhq.baton.plist, as the
//     README's "Installing it as a service" uses them;
//   - for Linux, baton_1.2.3_ARCH.deb and baton-1.2.3-1.RPMARCH.rpm. They install
//     /usr/bin/baton, the unit /usr/lib/systemd/system/baton.service (made from
//     deploy/systemd/baton.service with ExecStart at /usr/bin/baton), the gzipped
//     manual pages in /usr/share/man/man1 and the completion where bash, zsh and fish
//     look for a distribution's. Their postinstall (scripts/postinstall.sh) makes the
//     system user baton and /var/lib/baton (0700) when missing and runs `systemctl
//     daemon-reload` under systemd; it neither enables nor starts the service, since
//     the device must first be made by `baton init` or `baton join` as that user.
//     Removing the package stops and disables the service; the user and
//     /var/lib/baton (the keys) stay, even on purge.
//
// and SHA256SUMS over all of them (`sha256sum -c SHA256SUMS` checks it). Every file
// in an archive or a package carries the time of the commit built (SOURCE_DATE_EPOCH
// when set), so two builds of one commit with one Go toolchain give the same bytes.
// It refuses a checkout with uncommitted changes to tracked files unless
// --allow-dirty (CI's packaging step passes it).
//
// To release v1.2.3, on a clean checkout of the commit to release (CI green on it):
//
//  1. git tag -a v1.2.3 -m v1.2.3
//  2. cd tools/release && go run . --version v1.2.3 --out ../../dist
//  3. cd ../../dist && sha256sum -c SHA256SUMS; try the .deb on a test machine (sudo
//     dpkg -i baton_1.2.3_amd64.deb; baton version names v1.2.3 and the revision)
//  4. git push origin v1.2.3, and publish dist/* (the archives, packages and
//     SHA256SUMS) as the release's files.
//
// CI (.ci/run) builds the .deb for its own architecture this way, installs it with
// dpkg, checks what it installed and removes it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command: it returns the exit status (2 for a usage mistake).
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var targets string
	fs.StringVar(&cfg.Version, "version", "", "the release's version: semver with a leading v (v1.2.3, v1.2.3-rc.1)")
	fs.StringVar(&cfg.Out, "out", "", "the directory to write the archives, packages and SHA256SUMS into (default: dist in the repository)")
	fs.StringVar(&targets, "targets", defaultTargets, "comma-separated OS/ARCH to build, of "+defaultTargets)
	fs.StringVar(&cfg.Repo, "repo", "", "baton's repository (default: found upward from the working directory)")
	fs.BoolVar(&cfg.AllowDirty, "allow-dirty", false, "build even if tracked files have uncommitted changes")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "release: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := checkVersion(cfg.Version); err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 2
	}
	t, err := parseTargets(targets)
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 2
	}
	cfg.Targets = t
	cfg.Log = stderr
	files, err := release(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return 0
}
