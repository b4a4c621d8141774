package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.2.3", "v10.20.30", "v1.2.3-rc.1", "v1.0.0-alpha-a.b-c", "v1.2.3+build.5", "v1.2.3-rc.1+20260101"} {
		if err := checkVersion(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"", "1.2.3", "v1.2", "v1", "v01.2.3", "v1.2.3-", "v1.2.3-01", "v1.2.3 ", "V1.2.3", "v1.2.3-rc..1", "latest"} {
		if err := checkVersion(v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}

func TestParseTargets(t *testing.T) {
	got, err := parseTargets("linux/amd64, darwin/arm64")
	if err != nil || !slices.Equal(got, []target{{"linux", "amd64"}, {"darwin", "arm64"}}) {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := parseTargets(defaultTargets); err != nil || len(got) != 4 {
		t.Fatalf("%v %v", got, err)
	}
	for _, s := range []string{"", "windows/amd64", "linux/386", "linux/amd64,linux/amd64", "linux"} {
		if _, err := parseTargets(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// A usage mistake is one line naming the flag, and exit status 2, before any build.
func TestRunUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--version is required"},
		{[]string{"--version", "1.2.3"}, `--version "1.2.3" is not a semantic version with a leading v`},
		{[]string{"--version", "v1.2.3", "--targets", "plan9/amd64"}, `unknown target "plan9/amd64"`},
		{[]string{"--version", "v1.2.3", "extra"}, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// The packaged unit is the repository's with ExecStart at /usr/bin/baton: from
// [Unit] on, nothing else differs.
func TestPackagedUnit(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "baton.service"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := packagedUnit(string(src))
	if err != nil {
		t.Fatal(err)
	}
	body := func(u string) string { return u[strings.Index(u, "\n[Unit]\n"):] }
	want := strings.Replace(body(string(src)), "ExecStart=/usr/local/bin/baton run\n", "ExecStart=/usr/bin/baton run\n", 1)
	if body(got) != want {
		t.Errorf("packaged unit body differs:\n%s", body(got))
	}
	if !strings.Contains(got, "\nExecStart=/usr/bin/baton run\n") || strings.Contains(got, "/usr/local") {
		t.Errorf("packaged unit:\n%s", got)
	}
	if _, err := packagedUnit(strings.Replace(string(src), "/usr/local/bin/baton run", "/opt/baton run", 1)); err == nil {
		t.Error("a unit whose ExecStart moved was accepted")
	}
}

// The scripts are sh, and the only systemctl commands they run reload systemd, ask
// whether baton runs, or (on removal) stop it: installing never enables or starts it.
func TestScripts(t *testing.T) {
	ents, err := scripts.ReadDir("scripts")
	if err != nil || len(ents) != 3 {
		t.Fatalf("%v %v", ents, err)
	}
	for _, e := range ents {
		p := filepath.Join("scripts", e.Name())
		if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v %s", p, err, out)
		}
		data, _ := os.ReadFile(p)
		for _, m := range regexp.MustCompile(`(?m)^\s*systemctl\s+(\S+)`).FindAllStringSubmatch(string(data), -1) {
			allowed := []string{"daemon-reload", "is-active"}
			if e.Name() == "preremove.sh" {
				allowed = append(allowed, "disable")
			}
			if !slices.Contains(allowed, m[1]) {
				t.Errorf("%s runs systemctl %s", p, m[1])
			}
		}
	}
}

// The one command, for this machine's Linux architecture: the archive, the .deb and
// the .rpm, and SHA256SUMS over them; the .deb installs what it should. (It runs as
// `go run .`, not in this process: under -race, compressing the binary three times
// would take minutes.)
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds baton")
	}
	out := t.TempDir()
	const version = "v0.0.1-test.1"
	arch := runtime.GOARCH
	cmd := exec.Command("go", "run", ".", "--version", version, "--out", out, "--targets", "linux/"+arch, "--allow-dirty")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run . %v: %v\n%s", cmd.Args[3:], err, stderr.String())
	}
	written := strings.Fields(stdout.String())
	deb := filepath.Join(out, "baton_0.0.1~test.1-1_"+arch+".deb")
	tgz := filepath.Join(out, "baton_0.0.1-test.1_linux_"+arch+".tar.gz")
	rpm, _ := filepath.Glob(filepath.Join(out, "baton-0.0.1~test.1-1.*.rpm"))
	if len(rpm) != 1 {
		t.Fatalf("rpm: %v in %v", rpm, written)
	}
	if want := []string{tgz, deb, rpm[0], filepath.Join(out, "SHA256SUMS")}; !slices.Equal(written, want) {
		t.Fatalf("wrote %v, want %v", written, want)
	}

	// SHA256SUMS: one line per artifact, in sha256sum's format, each right.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(data)); got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
		}
		listed = append(listed, name)
	}
	wantListed := []string{filepath.Base(rpm[0]), filepath.Base(deb), filepath.Base(tgz)}
	sort.Strings(wantListed)
	if !slices.Equal(listed, wantListed) {
		t.Errorf("SHA256SUMS lists %v, want %v", listed, wantListed)
	}
	src, err := readSource(filepath.Join("..", ".."), io.Discard)
	if err != nil {
		t.Fatal(err)
	}

	// The archive: the binary, the docs and the deploy files under one directory.
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, gz, src.MTime, nil)
	base := "baton_0.0.1-test.1_linux_" + arch + "/"
	for _, want := range []string{"baton", "LICENSE", "README.md", "man/man1/baton.1", "man/man1/baton-run.1",
		"completions/baton.bash", "completions/_baton", "completions/baton.fish",
		"deploy/systemd/baton.service", "deploy/launchd/org.batonhq.baton.plist"} {
		if names[base+want] == 0 {
			t.Errorf("archive lacks %s%s: %v", base, want, names)
		}
	}
	if names[base+"baton"] != 0o755 {
		t.Errorf("archive's baton mode %o", names[base+"baton"])
	}

	// The .deb: its control fields and scripts, and the files it installs.
	members := readAr(t, deb)
	if string(members["debian-binary"]) != "2.0\n" {
		t.Errorf("debian-binary %q", members["debian-binary"])
	}
	control := map[string][]byte{}
	cgz, err := gzip.NewReader(bytes.NewReader(members["control.tar.gz"]))
	if err != nil {
		t.Fatal(err)
	}
	tarNames(t, cgz, src.MTime, control)
	for _, field := range []string{"Package: baton\n", "Version: 0.0.1~test.1-1\n", "Architecture: " + arch + "\n"} {
		if !bytes.Contains(control["./control"], []byte(field)) {
			t.Errorf("control lacks %q:\n%s", field, control["./control"])
		}
	}
	for _, s := range []string{"./postinst", "./prerm", "./postrm"} {
		if control[s] == nil {
			t.Errorf("no %s in control.tar.gz", s)
		}
	}
	if !bytes.Contains(control["./postinst"], []byte("useradd --system")) {
		t.Errorf("postinst:\n%s", control["./postinst"])
	}
	data := map[string][]byte{}
	dgz, err := gzip.NewReader(bytes.NewReader(members["data.tar.gz"]))
	if err != nil {
		t.Fatal(err)
	}
	modes := tarNames(t, dgz, src.MTime, data)
	for p, mode := range map[string]int64{
		"./usr/bin/baton":                                  0o755,
		"./usr/lib/systemd/system/baton.service":           0o644,
		"./usr/share/man/man1/baton.1.gz":                  0o644,
		"./usr/share/man/man1/baton-run.1.gz":              0o644,
		"./usr/share/bash-completion/completions/baton":    0o644,
		"./usr/share/zsh/vendor-completions/_baton":        0o644,
		"./usr/share/fish/vendor_completions.d/baton.fish": 0o644,
		"./usr/share/doc/baton/copyright":                  0o644,
	} {
		if modes[p] != mode {
			t.Errorf("the .deb's %s: mode %o, want %o", p, modes[p], mode)
		}
	}
	for p := range modes {
		if !strings.HasPrefix(p, "./usr/") || strings.HasPrefix(p, "./usr/local/") {
			t.Errorf("the .deb installs %s", p)
		}
	}
	if !bytes.Contains(data["./usr/lib/systemd/system/baton.service"], []byte("\nExecStart=/usr/bin/baton run\n")) {
		t.Errorf("the .deb's unit:\n%s", data["./usr/lib/systemd/system/baton.service"])
	}
	page, err := gzip.NewReader(bytes.NewReader(data["./usr/share/man/man1/baton.1.gz"]))
	if err != nil {
		t.Fatal(err)
	}
	roff, _ := io.ReadAll(page)
	if !bytes.Contains(roff, []byte(`.TH "BATON" "1"`)) || !bytes.Contains(roff, []byte("baton "+version)) {
		t.Errorf("baton.1:\n%.300s", roff)
	}

	// dpkg, where there is one, reads it the same.
	if _, err := exec.LookPath("dpkg-deb"); err == nil {
		out, err := exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(" ./usr/bin/baton\n")) {
			t.Errorf("dpkg-deb --contents: %v\n%s", err, out)
		}
		out, err = exec.Command("dpkg-deb", "--field", deb, "Version").CombinedOutput()
		if err != nil || string(out) != "0.0.1~test.1-1\n" {
			t.Errorf("dpkg-deb --field Version: %v %q", err, out)
		}
	}
}

// tarNames reads a tar stream: each name's mode. Every entry must carry mtime and
// belong to root. With files, it also keeps each regular file's content.
func tarNames(t *testing.T, r io.Reader, mtime time.Time, files map[string][]byte) map[string]int64 {
	t.Helper()
	names := map[string]int64{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d, want %v, root", h.Name, h.ModTime, h.Uid, h.Gid, mtime)
		}
		names[h.Name] = h.Mode & 0o7777
		if files != nil && h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// readAr reads the members of an ar archive (a .deb).
func readAr(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("!<arch>\n")) {
		t.Fatalf("%s: not an ar archive", path)
	}
	members := map[string][]byte{}
	for b = b[8:]; len(b) >= 60; {
		name := strings.TrimSuffix(strings.TrimSpace(string(b[0:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(b[48:58])))
		if err != nil || string(b[58:60]) != "`\n" || 60+size > len(b) {
			t.Fatalf("%s: bad ar header %q", path, b[:60])
		}
		members[name] = b[60 : 60+size]
		b = b[60+size+size%2:]
	}
	return members
}
