package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/testutil"
)

func TestPprofAddr(t *testing.T) {
	for _, bad := range []string{"0.0.0.0:0", "192.0.2.1:6060", ":6060", "nonsense"} {
		if _, _, err := servePprof(bad, testutil.Logger(t)); err == nil {
			t.Errorf("%q: served", bad)
		}
	}
	addr, stop, err := servePprof("127.0.0.1:0", testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("%s: %.200s", resp.Status, body)
	}
}
