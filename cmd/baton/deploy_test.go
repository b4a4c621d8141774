package main

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/node"
)

func readRepo(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runFlagOf maps BATON_FOO_BAR to run's --foo-bar, failing when run has no such flag.
func checkEnvFlags(t *testing.T, file, text string) {
	t.Helper()
	run := (&cli{}).runCmd()
	for _, m := range regexp.MustCompile(`\bBATON_([A-Z_]+)`).FindAllStringSubmatch(text, -1) {
		name := strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))
		if name == "flag" { // the BATON_<FLAG> pattern in comments
			continue
		}
		if run.Flags().Lookup(name) == nil {
			t.Errorf("%s sets %s, but `baton run` has no --%s", file, m[0], name)
		}
	}
}

// The packaging files parse, run `baton run`, and set only flags that exist.
func TestPackaging(t *testing.T) {
	if lic := readRepo(t, "LICENSE"); !strings.Contains(lic, "Apache License") || !strings.Contains(lic, "Version 2.0, January 2004") {
		t.Error("LICENSE is not the Apache License 2.0")
	}

	unit := readRepo(t, "deploy", "systemd", "baton.service")
	sections := parseUnit(t, unit)
	svc := sections["Service"]
	if svc == nil || sections["Unit"] == nil || sections["Install"] == nil {
		t.Fatalf("baton.service sections: %v", sections)
	}
	if got := svc["ExecStart"]; len(got) != 1 || got[0] != "/usr/local/bin/baton run" {
		t.Errorf("ExecStart %v", got)
	}
	if svc["KillSignal"][0] != "SIGTERM" || svc["User"][0] != "baton" {
		t.Errorf("service: %v", svc)
	}
	checkEnvFlags(t, "baton.service", unit)

	plist := readRepo(t, "deploy", "launchd", "org.batonhq.baton.plist")
	dec := xml.NewDecoder(strings.NewReader(plist))
	var strs []string
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("plist: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && (se.Name.Local == "string" || se.Name.Local == "key") {
			var s string
			if err := dec.DecodeElement(&s, &se); err != nil {
				t.Fatal(err)
			}
			strs = append(strs, s)
		}
	}
	joined := strings.Join(strs, " ")
	if !strings.Contains(joined, "Label org.batonhq.baton ProgramArguments /bin/sh -c ") || !strings.Contains(joined, "exec /usr/local/bin/baton run EnvironmentVariables") {
		t.Errorf("plist program: %s", joined)
	}
	checkEnvFlags(t, "org.batonhq.baton.plist", joined)

	// Docker's engine is not available here: the Dockerfile is checked, not built.
	df := readRepo(t, "Dockerfile")
	for _, want := range []string{"go build", "./cmd/baton", `ENTRYPOINT ["/usr/local/bin/baton"]`, `CMD ["run"]`, "VOLUME /data", "USER nonroot"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	for _, line := range strings.Split(df, "\n") {
		if strings.HasPrefix(line, "ENV ") {
			checkEnvFlags(t, "Dockerfile", line)
		}
	}
}

// parseUnit reads a systemd unit's sections: section -> key -> values in order.
func parseUnit(t *testing.T, unit string) map[string]map[string][]string {
	t.Helper()
	sections := map[string]map[string][]string{}
	cur := ""
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = line[1 : len(line)-1]
			sections[cur] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == "" {
				t.Fatalf("baton.service: not key=value in a section: %q", line)
			}
			sections[cur][k] = append(sections[cur][k], v)
		}
	}
	return sections
}

// checkDataLayout checks, for one place the packaging puts a data dir, that the service
// user can create the data dir and the mark (the highest Raft term and index reached:
// outside the data dir, so that a restored data dir is recognised; by default
// <data>.mark, beside it) in directories it owns (writable).
func checkDataLayout(t *testing.T, where, data, mark string, writable []string) {
	t.Helper()
	if mark == "" {
		mark = data + node.MarkSuffix // the default (signer/node: Config.MarkFile)
	}
	owned := func(dir string) bool {
		for _, w := range writable {
			if dir == filepath.Clean(w) {
				return true
			}
		}
		return false
	}
	if !filepath.IsAbs(data) || !owned(filepath.Dir(data)) {
		t.Errorf("%s: the data dir %s is not in a directory the service user owns (%v)", where, data, writable)
	}
	if !owned(filepath.Dir(mark)) {
		t.Errorf("%s: the mark %s is not in a directory the service user owns (%v): the node logs an ERROR on every start", where, mark, writable)
	}
	if rel, err := filepath.Rel(data, mark); err != nil || !strings.HasPrefix(rel, "..") {
		t.Errorf("%s: the mark %s is inside the data dir %s: a restored data dir would restore it too", where, mark, data)
	}
}

// Where the packaging and the README put the data dir, the service user can write its
// parent, so the default mark beside it works (issue 39.3: the unit and the README put
// it at /var/lib/baton, whose parent the baton user cannot write, and `baton join` as
// the README says logged an ERROR on its first start; the image put it at /data, the
// root of its volume, in / which nonroot cannot write).
func TestDataDirParentWritable(t *testing.T) {
	// systemd: StateDirectory= directories (under /var/lib) belong to User=.
	unit := readRepo(t, "deploy", "systemd", "baton.service")
	svc := parseUnit(t, unit)["Service"]
	env := map[string]string{}
	for _, e := range svc["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	var states []string
	for _, sd := range svc["StateDirectory"] {
		for _, d := range strings.Fields(sd) {
			states = append(states, "/var/lib/"+d)
		}
	}
	data := env["BATON_DATA"]
	checkDataLayout(t, "baton.service", data, env["BATON_MARK_FILE"], states)
	if data != ServiceDataDir {
		t.Errorf("baton.service's data dir %s is not ServiceDataDir %s (where the CLI looks as root)", data, ServiceDataDir)
	}

	// The README's install steps: the directories it makes for the baton user, and the
	// data dir its join (the device's first start, before the unit) uses.
	readme := readRepo(t, "README.md")
	var made []string
	for _, m := range regexp.MustCompile(`install -d -o baton -g baton -m 0700 (\S+)`).FindAllStringSubmatch(readme, -1) {
		made = append(made, m[1])
	}
	join := regexp.MustCompile(`sudo -u baton baton (?:join|init) --data (\S+)`).FindStringSubmatch(readme)
	if join == nil || len(made) == 0 {
		t.Fatalf("README: no install steps found (install -d -o baton: %v; join: %v)", made, join)
	}
	checkDataLayout(t, "README's install", join[1], "", made)
	if join[1] != data {
		t.Errorf("README's install uses the data dir %s, the unit %s", join[1], data)
	}

	// Docker: the image's nonroot user owns the directory it copies with --chown, the
	// volume; the data dir is inside it.
	df := readRepo(t, "Dockerfile")
	if !strings.Contains(df, "USER nonroot") {
		t.Fatal("Dockerfile: not run as nonroot")
	}
	var owned []string
	for _, m := range regexp.MustCompile(`COPY --from=build --chown=65532:65532 \S+ (\S+)`).FindAllStringSubmatch(df, -1) {
		owned = append(owned, m[1])
	}
	ddata := regexp.MustCompile(`(?m)^ENV .*\bBATON_DATA=(\S+)`).FindStringSubmatch(df)
	vol := regexp.MustCompile(`(?m)^VOLUME (\S+)`).FindStringSubmatch(df)
	if ddata == nil || vol == nil {
		t.Fatalf("Dockerfile: BATON_DATA %v, VOLUME %v", ddata, vol)
	}
	checkDataLayout(t, "Dockerfile", ddata[1], "", owned)
	if filepath.Dir(ddata[1]) != vol[1] {
		t.Errorf("Dockerfile: the data dir %s and its mark are not on the volume %s", ddata[1], vol[1])
	}
}

// A binary built from a git checkout says which revision in `baton version`.
func TestE2EVersionRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the built binary")
	}
	_, out, _ := bin(t, "", "version")
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))[:12]
	if !strings.Contains(out, rev) {
		// go stamps a checkout's revision unless -buildvcs=false; in a git worktree
		// (a .git file) go 1.26 does not stamp at all.
		if fi, err := os.Stat(filepath.Join("..", "..", ".git")); err == nil && !fi.IsDir() {
			t.Skipf("a git worktree: the build is not VCS-stamped (%q)", strings.TrimSpace(out))
		}
		t.Fatalf("version %q lacks the revision %s", out, rev)
	}
}

// TestLaunchdWrapperNeedsNoEdits: the plist's wrapper runs as it is for any user (issue
// 39 item 6: it named /Users/USER and logged to /tmp): the data dir defaults to
// $HOME/.baton, the log goes to ~/Library/Logs/baton/baton.log, rotated at start once
// over 10 MB, and a removed device is not started.
func TestLaunchdWrapperNeedsNoEdits(t *testing.T) {
	plist := readRepo(t, "deploy", "launchd", "org.batonhq.baton.plist")
	if strings.Contains(plist, "USER") || strings.Contains(plist, "/tmp/") {
		t.Fatal("the plist still needs an edit (USER) or logs to /tmp")
	}
	dec := xml.NewDecoder(strings.NewReader(plist))
	var script string
	for prev := ""; ; {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "string" {
			var s string
			if err := dec.DecodeElement(&s, &se); err != nil {
				t.Fatal(err)
			}
			if prev == "-c" {
				script = s
			}
			prev = s
		}
	}
	if script == "" {
		t.Fatal("no /bin/sh -c script in the plist")
	}
	home := t.TempDir()
	stub := filepath.Join(t.TempDir(), "baton")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\necho \"stub run: $* data=$BATON_DATA\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", strings.ReplaceAll(script, "/usr/local/bin/baton", stub))
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("wrapper: %v %s", err, out)
		}
		b, _ := os.ReadFile(filepath.Join(home, "Library", "Logs", "baton", "baton.log"))
		return string(b)
	}
	if log := run(); !strings.Contains(log, "stub run: run data="+filepath.Join(home, ".baton")) {
		t.Fatalf("log: %q", log)
	}
	logf := filepath.Join(home, "Library", "Logs", "baton", "baton.log")
	if err := os.WriteFile(logf, make([]byte, 10<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.HasPrefix(log, "stub run") {
		t.Fatalf("a log over 10 MB was not rotated: %d bytes", len(log))
	}
	if fi, err := os.Stat(logf + ".1"); err != nil || fi.Size() != 10<<20+1 {
		t.Fatalf("the rotated log: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".baton"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".baton", "removed.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.Contains(log, "was removed from its cluster") || strings.Count(log, "stub run") != 1 {
		t.Fatalf("a removed device: %q", log)
	}
}
