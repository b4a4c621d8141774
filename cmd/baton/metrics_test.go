package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/signer/node"
)

// syncBuffer is a bytes.Buffer safe for the node's goroutines to write.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runInProcess starts `baton args...` in this process; stop cancels it and returns
// its exit status.
func runInProcess(t *testing.T, args ...string) (stdout, stderr *syncBuffer, stop func() int) {
	t.Helper()
	stdout, stderr, stop, _ = runInProcessWait(t, args...)
	return stdout, stderr, stop
}

// runInProcessWait is runInProcess with a wait that returns the exit status once the
// command ends by itself (ok false when it did not within timeout).
func runInProcessWait(t *testing.T, args ...string) (stdout, stderr *syncBuffer, stop func() int, wait func(time.Duration) (int, bool)) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	c := &cli{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	code := -1
	go func() { code = c.main(ctx, args); close(done) }()
	wait = func(d time.Duration) (int, bool) {
		select {
		case <-done:
			return code, true
		case <-time.After(d):
			return -1, false
		}
	}
	stop = func() int {
		cancel()
		c, ok := wait(30 * time.Second)
		if !ok {
			t.Errorf("baton %v did not stop", args)
		}
		return c
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop, wait
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// exposedNames parses the Prometheus text exposition into the set of sample names.
func exposedNames(text string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\b((?:baton|go|process)_[a-z0-9_]+)\b`)

// deployExprs returns the PromQL expressions of the Grafana dashboard and the alert
// rules under deploy/, failing the test if either does not parse.
func deployExprs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	dash := filepath.Join("..", "..", "deploy", "grafana", "baton-dashboard.json")
	raw, err := os.ReadFile(dash)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: %v (%d panels)", dash, err, len(d.Panels))
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dash, p.Title)
		}
		for _, tg := range p.Targets {
			out[dash] = append(out[dash], tg.Expr)
		}
	}
	rules := filepath.Join("..", "..", "deploy", "prometheus", "baton-alerts.yml")
	raw, err = os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil || len(r.Groups) == 0 {
		t.Fatalf("%s: %v", rules, err)
	}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" || rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" {
				t.Errorf("%s: rule %+v lacks alert, expr, severity or summary", rules, rule)
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("%s: %s: for %q: %v", rules, rule.Alert, rule.For, err)
				}
			}
			out[rules] = append(out[rules], rule.Expr)
		}
	}
	return out
}

// TestMetricsAddrAndDeploy runs a real node with --metrics-addr and JSON logs, scrapes
// it, checks that the metrics-only listener serves nothing of the API, that every
// metric the Grafana dashboard and the alert rules use exists, and that a normal start
// and a Ctrl-C log no warning or error, durations as strings and this device's ID
// under one key.
func TestMetricsAddrAndDeploy(t *testing.T) {
	exprs := deployExprs(t)
	data := mustInit(t)
	maddr := freeAddr(t)
	_, stderr, stop := runInProcess(t, "run", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--metrics-addr", maddr,
		"--ttl", "1s", "--tick", "100ms", "--raft-timeout", "300ms", "--log-format", "json", "--log-level", "debug")
	base := "http://" + maddr
	var metrics string
	testutil.WaitFor(t, 20*time.Second, "the node to hold the lease (metrics)", func() bool {
		code, body, err := httpGet(base + "/metrics")
		metrics = body
		return err == nil && code == 200 && regexp.MustCompile(`(?m)^baton_lease_held 1$`).MatchString(body)
	})
	if code, body, err := httpGet(base + "/healthz"); err != nil || code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("healthz: %d %q %v", code, body, err)
	}
	for _, path := range []string{"/v1/state", "/v1/lease/history", "/v1/members"} {
		if code, _, err := httpGet(base + path); err != nil || code != http.StatusNotFound {
			t.Errorf("metrics listener serves %s: %d %v", path, code, err)
		}
	}
	resp, err := http.Post(base+"/v1/lease/steal", "application/json", strings.NewReader(`{"reason":"x"}`))
	if err != nil || resp.StatusCode == http.StatusOK {
		t.Fatalf("metrics listener accepts a steal: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, want := range []string{`baton_build_info{goversion="go1.`, `baton_raft_state{role="leader"} 1`, "go_goroutines", "process_resident_memory_bytes",
		"baton_lease_expires_in_seconds", `baton_lease_holder{holder="12D3`, "baton_lease_takeover_seconds_bucket", "baton_raft_quorum 1",
		`baton_peer_reachable{name="`, `",peer="12D3`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The device's name (the host's, by default) labels it beside its ID.
	if host := node.DefaultName(); host != "" && !strings.Contains(metrics, `name="`+host+`"`) {
		t.Errorf("metrics lack the device's name %q", host)
	}
	if regexp.MustCompile(`role="[A-Z]`).MatchString(metrics) {
		t.Error("capitalised role label values")
	}
	names := exposedNames(metrics)
	for file, es := range exprs {
		for _, e := range es {
			for _, m := range metricRef.FindAllString(e, -1) {
				if !names[m] {
					t.Errorf("%s uses %s, which a running node does not expose (in %q)", file, m, e)
				}
			}
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("run after Ctrl-C: exit %d\n%s", code, stderr.String())
	}
	logs := stderr.String()
	var ids []string
	starts := 0
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", sc.Text())
			continue
		}
		if lv := rec["level"]; lv == "WARN" || lv == "ERROR" {
			t.Errorf("a normal start and stop logged %s: %s", lv, sc.Text())
		}
		for _, k := range []string{"self", "id"} {
			if _, ok := rec[k]; ok {
				t.Errorf("the device's ID under %q: %s", k, sc.Text())
			}
		}
		if id, ok := rec["node"].(string); ok {
			ids = append(ids, id)
		}
		if rec["msg"] == "baton running" {
			starts++
			for k, v := range rec {
				if v == "" {
					t.Errorf("start line has an empty %s: %s", k, sc.Text())
				}
			}
		}
		for k, v := range rec {
			if _, isNum := v.(float64); isNum && (k == "tick" || k == "took" || k == "ttl") {
				t.Errorf("duration %s written as a number: %s", k, sc.Text())
			}
		}
		if strings.HasPrefix(fmt.Sprint(rec["msg"]), "raft: ") {
			t.Errorf("raft's line flattened into msg: %s", sc.Text())
		}
	}
	sort.Strings(ids)
	if starts != 1 || len(ids) == 0 || ids[0] != ids[len(ids)-1] || !strings.HasPrefix(ids[0], "12D3") {
		t.Errorf("start lines %d; node IDs %v (want one full peer ID)", starts, compact(ids))
	}
	if !strings.Contains(logs, `"tick":"100ms"`) {
		t.Errorf("no duration written as a string (tick):\n%s", tail(logs, 2000))
	}
}

func compact(ss []string) []string {
	var out []string
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}
