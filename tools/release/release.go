package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// defaultTargets are the platforms a release is built for.
const defaultTargets = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64"

// batonModule is the module the repository's go.mod must name.
const batonModule = "github.com/batonhq/baton"

//go:embed scripts/*.sh
var scripts embed.FS

// config is one run of the release build.
type config struct {
	Version    string   // v1.2.3 (checkVersion)
	Out        string   // where the archives, packages and SHA256SUMS go; "" is <Repo>/dist
	Repo       string   // baton's repository; "" finds it upward from the working directory
	Targets    []target // what to build
	AllowDirty bool     // build from a checkout whose tracked files have uncommitted changes
	Log        io.Writer
}

type target struct{ OS, Arch string }

func (t target) String() string { return t.OS + "/" + t.Arch }

// semverRE is semver.org's: MAJOR.MINOR.PATCH, an optional -prerelease and +build.
var semverRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// checkVersion accepts a semantic version with a leading v: v1.2.3, v1.2.3-rc.1.
func checkVersion(v string) error {
	if v == "" {
		return fmt.Errorf("--version is required: the release's semantic version with a leading v, like v1.2.3")
	}
	if !semverRE.MatchString(v) {
		return fmt.Errorf("--version %q is not a semantic version with a leading v (want vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], like v1.2.3 or v1.2.3-rc.1)", v)
	}
	return nil
}

// parseTargets reads "linux/amd64,darwin/arm64": each one of defaultTargets, once.
func parseTargets(s string) ([]target, error) {
	known := strings.Split(defaultTargets, ",")
	var out []target
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(known, f) {
			return nil, fmt.Errorf("--targets: unknown target %q (want some of %s)", f, defaultTargets)
		}
		goos, goarch, _ := strings.Cut(f, "/")
		t := target{goos, goarch}
		if slices.Contains(out, t) {
			return nil, fmt.Errorf("--targets: %s named twice", f)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--targets: none given (want some of %s)", defaultTargets)
	}
	return out, nil
}

// findRepo walks up from dir to the directory whose go.mod is baton's.
func findRepo(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isBatonRepo(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no baton repository (a go.mod of module %s) in %s or above it: give --repo", batonModule, dir)
		}
	}
}

func isBatonRepo(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(b)
	return m != nil && string(m[1]) == batonModule
}

// source is what the repository's checkout says of the build.
type source struct {
	Revision string    // git HEAD, "" outside a git checkout
	Dirty    bool      // tracked files differ from HEAD
	MTime    time.Time // every file's time in the archives and packages
}

// fallbackMTime is the files' time outside a git checkout without SOURCE_DATE_EPOCH.
var fallbackMTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func readSource(repo string, log io.Writer) (source, error) {
	var s source
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "--verify", "HEAD")
	if err != nil {
		fmt.Fprintf(log, "release: warning: %s is not a git checkout (%v): the binaries name no revision\n", repo, err)
		s.MTime = fallbackMTime
	} else {
		s.Revision = rev
		status, err := git("status", "--porcelain", "--untracked-files=no")
		if err != nil {
			return s, fmt.Errorf("git status: %v", err)
		}
		s.Dirty = status != ""
		ct, err := git("log", "-1", "--format=%ct", "HEAD")
		if err != nil {
			return s, fmt.Errorf("git log: %v", err)
		}
		sec, err := strconv.ParseInt(ct, 10, 64)
		if err != nil {
			return s, fmt.Errorf("git log: the commit time %q: %v", ct, err)
		}
		s.MTime = time.Unix(sec, 0).UTC()
	}
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		sec, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return s, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a number of seconds", e)
		}
		s.MTime = time.Unix(sec, 0).UTC()
	}
	return s, nil
}

// release builds everything cfg asks for and returns the files it wrote, SHA256SUMS last.
func release(cfg config) ([]string, error) {
	if err := checkVersion(cfg.Version); err != nil {
		return nil, err
	}
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("no targets")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	repo := cfg.Repo
	if repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		if repo, err = findRepo(wd); err != nil {
			return nil, err
		}
	} else if !isBatonRepo(repo) {
		return nil, fmt.Errorf("--repo %s: no go.mod of module %s there", repo, batonModule)
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == "" {
		out = filepath.Join(repo, "dist")
	}
	if out, err = filepath.Abs(out); err != nil {
		return nil, err
	}
	src, err := readSource(repo, cfg.Log)
	if err != nil {
		return nil, err
	}
	if src.Dirty {
		if !cfg.AllowDirty {
			return nil, fmt.Errorf("%s has uncommitted changes to tracked files: commit them (a release is built from a commit) or pass --allow-dirty", repo)
		}
		fmt.Fprintf(cfg.Log, "release: warning: building with uncommitted changes; the binaries name revision %.12s all the same\n", src.Revision)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "baton-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	b := &builder{cfg: cfg, repo: repo, out: out, work: work, src: src}
	return b.run()
}

type builder struct {
	cfg             config
	repo, out, work string
	src             source
	docs            docs
	written         []string // files written into out
}

// docs are the files generated by the binary built for this machine.
type docs struct {
	man         map[string][]byte // baton.1, baton-status.1, ...
	completions map[string][]byte // baton.bash, _baton, baton.fish
}

func (b *builder) logf(format string, args ...any) {
	fmt.Fprintf(b.cfg.Log, "release: "+format+"\n", args...)
}

func (b *builder) run() ([]string, error) {
	bins := map[target]string{}
	for _, t := range b.cfg.Targets {
		p, err := b.build(t)
		if err != nil {
			return nil, err
		}
		bins[t] = p
	}
	host := target{runtime.GOOS, runtime.GOARCH}
	hostBin, ok := bins[host]
	if !ok {
		var err error
		if hostBin, err = b.build(host); err != nil {
			return nil, err
		}
	}
	if err := b.generate(hostBin); err != nil {
		return nil, err
	}
	for _, t := range b.cfg.Targets {
		if err := b.archive(t, bins[t]); err != nil {
			return nil, err
		}
		if t.OS == "linux" {
			for _, format := range []string{"deb", "rpm"} {
				if err := b.pkg(t, bins[t], format); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := b.sums(); err != nil {
		return nil, err
	}
	return b.written, nil
}

// build cross-compiles baton for t into the work directory.
func (b *builder) build(t target) (string, error) {
	bin := filepath.Join(b.work, "bin", t.OS+"_"+t.Arch, "baton")
	ldflags := "-s -w -X main.releaseVersion=" + b.cfg.Version
	if b.src.Revision != "" {
		ldflags += " -X main.revision=" + b.src.Revision
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./cmd/baton")
	cmd.Dir = b.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.OS, "GOARCH="+t.Arch)
	cmd.Stdout, cmd.Stderr = b.cfg.Log, b.cfg.Log
	b.logf("go build %s", t)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build for %s: %v", t, err)
	}
	return bin, nil
}

// generate runs the binary built for this machine for the version it names, the
// manual pages and the completion.
func (b *builder) generate(bin string) error {
	// The pages and completion do not depend on the environment, but BATON_* would
	// be read as flags: leave them out.
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BATON_") {
			env = append(env, e)
		}
	}
	runBin := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("baton %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	v, err := runBin("version")
	if err != nil {
		return err
	}
	want := "baton " + b.cfg.Version + " "
	if b.src.Revision != "" {
		want += b.src.Revision[:min(12, len(b.src.Revision))] + " "
	}
	if !strings.HasPrefix(string(v), want) {
		return fmt.Errorf("the built binary's version is %q, want it to start %q (is main.releaseVersion still in cmd/baton?)", strings.TrimSpace(string(v)), want)
	}
	b.logf("built %s", strings.TrimSpace(string(v)))

	mandir := filepath.Join(b.work, "man")
	if _, err := runBin("man", "--dir", mandir); err != nil {
		return err
	}
	pages, err := filepath.Glob(filepath.Join(mandir, "*.1"))
	if err != nil {
		return err
	}
	if len(pages) == 0 {
		return fmt.Errorf("baton man --dir wrote no page")
	}
	b.docs.man = map[string][]byte{}
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b.docs.man[filepath.Base(p)] = data
	}
	b.docs.completions = map[string][]byte{}
	for shell, name := range map[string]string{"bash": "baton.bash", "zsh": "_baton", "fish": "baton.fish"} {
		data, err := runBin("completion", shell)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return fmt.Errorf("baton completion %s printed nothing", shell)
		}
		b.docs.completions[name] = data
	}
	return nil
}

// plainVersion is the version without its leading v, as file names and packages carry it.
func (b *builder) plainVersion() string { return strings.TrimPrefix(b.cfg.Version, "v") }

// entry is one file of an archive.
type entry struct {
	name string // slash-separated, relative to the archive's directory
	mode int64
	data []byte
}

func (b *builder) readRepo(rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(b.repo, filepath.FromSlash(rel)))
}

// archive writes baton_VERSION_OS_ARCH.tar.gz.
func (b *builder) archive(t target, bin string) error {
	base := fmt.Sprintf("baton_%s_%s_%s", b.plainVersion(), t.OS, t.Arch)
	binData, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	entries := []entry{{"baton", 0o755, binData}}
	for _, rel := range []string{"LICENSE", "README.md", "deploy/systemd/baton.service", "deploy/launchd/org.batonhq.baton.plist"} {
		data, err := b.readRepo(rel)
		if err != nil {
			return err
		}
		entries = append(entries, entry{rel, 0o644, data})
	}
	for name, data := range b.docs.man {
		entries = append(entries, entry{"man/man1/" + name, 0o644, data})
	}
	for name, data := range b.docs.completions {
		entries = append(entries, entry{"completions/" + name, 0o644, data})
	}
	var buf bytes.Buffer
	if err := writeTarGz(&buf, base, entries, b.src.MTime); err != nil {
		return err
	}
	return b.write(base+".tar.gz", buf.Bytes())
}

// writeTarGz writes entries under the directory base, sorted, with their parent
// directories, owned by root, all at mtime: the same entries give the same bytes.
func writeTarGz(w io.Writer, base string, entries []entry, mtime time.Time) error {
	gz, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	dirs := map[string]bool{}
	var addDir func(string) error
	addDir = func(d string) error {
		if d == "." || dirs[d] {
			return nil
		}
		if err := addDir(path.Dir(d)); err != nil {
			return err
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: base + "/" + d + "/", Mode: 0o755,
			ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX})
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: base + "/", Mode: 0o755,
		ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}); err != nil {
		return err
	}
	for _, e := range entries {
		if err := addDir(path.Dir(e.name)); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: base + "/" + e.name, Mode: e.mode,
			Size: int64(len(e.data)), ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// packagedUnit is the unit the packages install: deploy/systemd/baton.service with
// ExecStart at /usr/bin/baton, and its opening comment (the steps to install it by
// hand) replaced by what is left to do after the package's install.
func packagedUnit(unit string) (string, error) {
	const execStart = "ExecStart=/usr/local/bin/baton run\n"
	if n := strings.Count(unit, execStart); n != 1 {
		return "", fmt.Errorf("deploy/systemd/baton.service: %d lines %q, want 1 (tools/release rewrites it for the packages)", n, strings.TrimSpace(execStart))
	}
	unit = strings.Replace(unit, execStart, "ExecStart=/usr/bin/baton run\n", 1)
	const keep = "# Settings go in /etc/default/baton"
	i := strings.Index(unit, keep)
	if i < 0 || strings.Contains(unit[:i], "[") {
		return "", fmt.Errorf("deploy/systemd/baton.service: no opening comment ending before %q (tools/release replaces it for the packages)", keep)
	}
	unit = `# systemd unit for one baton device, installed by the baton package (made by
# tools/release from deploy/systemd/baton.service, with ExecStart at /usr/bin/baton).
#
# The package made the baton user and its /var/lib/baton. Make the device as that
# user, then enable the service (README, "Installing it as a service"):
#
#   sudo -u baton baton join --data /var/lib/baton/data --invite-file - < invite   # or init --new-chain
#   systemctl enable --now baton
#   journalctl -u baton -f
#
` + unit[i:]
	if strings.Contains(unit, "/usr/local/") {
		return "", fmt.Errorf("the packaged unit still names /usr/local/: %q", unit)
	}
	return unit, nil
}

// pkgFiles writes the files the packages install (the manual pages gzipped, the
// unit, the scripts) into the work directory, once.
func (b *builder) pkgFiles() (string, error) {
	dir := filepath.Join(b.work, "pkg")
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	for _, d := range []string{"man", "completions", "scripts"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	for name, data := range b.docs.man {
		var buf bytes.Buffer
		gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression) // no name, no time: reproducible
		if err != nil {
			return "", err
		}
		if _, err := gz.Write(data); err != nil {
			return "", err
		}
		if err := gz.Close(); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "man", name+".gz"), buf.Bytes(), 0o644); err != nil {
			return "", err
		}
	}
	for name, data := range b.docs.completions {
		if err := os.WriteFile(filepath.Join(dir, "completions", name), data, 0o644); err != nil {
			return "", err
		}
	}
	unit, err := b.readRepo("deploy/systemd/baton.service")
	if err != nil {
		return "", err
	}
	pu, err := packagedUnit(string(unit))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "baton.service"), []byte(pu), 0o644); err != nil {
		return "", err
	}
	ents, err := scripts.ReadDir("scripts")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		data, err := scripts.ReadFile("scripts/" + e.Name())
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "scripts", e.Name()), data, 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// pkgContents are the files a package of format installs, each to its place.
func (b *builder) pkgContents(dir, bin, format string) files.Contents {
	var c files.Contents
	add := func(src, dst string, mode os.FileMode, typ string) {
		c = append(c, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: b.src.MTime}})
	}
	add(bin, "/usr/bin/baton", 0o755, "")
	add(filepath.Join(dir, "baton.service"), "/usr/lib/systemd/system/baton.service", 0o644, "")
	names := make([]string, 0, len(b.docs.man))
	for name := range b.docs.man {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		add(filepath.Join(dir, "man", name+".gz"), "/usr/share/man/man1/"+name+".gz", 0o644, "")
	}
	zsh := "/usr/share/zsh/vendor-completions/_baton" // Debian's place for a package's
	if format == "rpm" {
		zsh = "/usr/share/zsh/site-functions/_baton" // Fedora's and SUSE's
	}
	add(filepath.Join(dir, "completions", "baton.bash"), "/usr/share/bash-completion/completions/baton", 0o644, "")
	add(filepath.Join(dir, "completions", "_baton"), zsh, 0o644, "")
	add(filepath.Join(dir, "completions", "baton.fish"), "/usr/share/fish/vendor_completions.d/baton.fish", 0o644, "")
	if format == "deb" {
		add(filepath.Join(b.repo, "LICENSE"), "/usr/share/doc/baton/copyright", 0o644, "")
		add(filepath.Join(b.repo, "README.md"), "/usr/share/doc/baton/README.md", 0o644, "")
	} else {
		add(filepath.Join(b.repo, "LICENSE"), "/usr/share/licenses/baton/LICENSE", 0o644, files.TypeRPMLicense)
		add(filepath.Join(b.repo, "README.md"), "/usr/share/doc/baton/README.md", 0o644, files.TypeRPMDoc)
	}
	return c
}

const pkgDescription = `elect one signer among a few devices; extend one signed chain
baton elects one signer among a few devices and extends one signed chain that never
forks. The package installs the binary, its systemd unit (neither enabled nor
started), manual pages and shell completion, and makes the system user baton and
its state directory /var/lib/baton. Make the device as that user (baton init or
baton join), then systemctl enable --now baton.`

// pkg writes the .deb or .rpm of t.
func (b *builder) pkg(t target, bin, format string) error {
	dir, err := b.pkgFiles()
	if err != nil {
		return err
	}
	info := &nfpm.Info{
		Name:        "baton",
		Arch:        t.Arch,
		Platform:    "linux",
		Version:     b.cfg.Version,
		Release:     "1",
		Section:     "net",
		Priority:    "optional",
		Maintainer:  "baton maintainers",
		Description: pkgDescription,
		Vendor:      "batonhq",
		Homepage:    "https://github.com/batonhq/baton",
		License:     "Apache-2.0",
		MTime:       b.src.MTime,
		Overridables: nfpm.Overridables{
			Contents: b.pkgContents(dir, bin, format),
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(dir, "scripts", "postinstall.sh"),
				PreRemove:   filepath.Join(dir, "scripts", "preremove.sh"),
				PostRemove:  filepath.Join(dir, "scripts", "postremove.sh"),
			},
			RPM: nfpm.RPM{
				Summary:   "elect one signer among a few devices; extend one signed chain",
				Group:     "System Environment/Daemons",
				BuildHost: "baton-release", // not this machine's name: reproducible
			},
		},
		DisableGlobbing: true,
	}
	if format == "deb" {
		info.Depends = []string{"passwd"} // useradd, for the postinstall
	} else {
		// A .deb's description opens with its synopsis; an .rpm has the Summary for that.
		_, info.Description, _ = strings.Cut(pkgDescription, "\n")
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return fmt.Errorf("%s for %s: %v", format, t, err)
	}
	p, err := nfpm.Get(format)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := p.Package(info, &buf); err != nil {
		return fmt.Errorf("%s for %s: %v", format, t, err)
	}
	return b.write(p.ConventionalFileName(info), buf.Bytes())
}

// write puts one artifact into out.
func (b *builder) write(name string, data []byte) error {
	p := filepath.Join(b.out, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	b.logf("wrote %s (%.1f MB)", p, float64(len(data))/1e6)
	b.written = append(b.written, p)
	return nil
}

// sums writes SHA256SUMS over the artifacts, in sha256sum's format.
func (b *builder) sums() error {
	var lines []string
	for _, p := range b.written {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%x  %s\n", sha256.Sum256(data), filepath.Base(p)))
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return b.write("SHA256SUMS", []byte(strings.Join(lines, "")))
}
