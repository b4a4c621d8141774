package main

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
