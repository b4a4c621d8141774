// Package testutil holds the helpers baton's package tests share: reproducible chain
// keys and the test form of the one poll-with-deadline helper (internal/wait).
package testutil

import (
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/wait"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/transport"
)

// Key returns a chain key from a fixed seed (byte i = i + n), so that its bytes and
// signatures are reproducible.
func Key(tb testing.TB, n byte) *chain.Ed25519Key {
	tb.Helper()
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i) + n
	}
	k, err := chain.NewEd25519KeyFromSeed(seed)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// WaitFor polls cond (which must not block) until it holds, failing the test when
// timeout passes first. Use it only where no event says the condition became true.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if err := wait.For(timeout, what, cond); err != nil {
		tb.Fatal(err)
	}
}

// FastRaft shortens Raft's timeouts for clusters on one machine (loopback round trips
// are sub-millisecond; 250 ms keeps a loaded 2-core machine from flapping).
func FastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 250 * time.Millisecond
	c.ElectionTimeout = 250 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
}

// Logger discards, unless the test runs with -v and BATON_TEST_LOG set (then debug
// lines go to the test's output).
func Logger(tb testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("BATON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// PSK returns a new network key.
func PSK(tb testing.TB) pnet.PSK {
	tb.Helper()
	psk, err := transport.GeneratePSK()
	if err != nil {
		tb.Fatal(err)
	}
	return psk
}

// Put returns a put intent with id, at path app.test/<id>, value "v-<id>".
func Put(id string) intentlog.Intent {
	return intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "app.test/" + id, Value: []byte("v-" + id)}
}

var (
	batonOnce sync.Once
	batonBin  string
	batonErr  error
)

// BatonBinary builds cmd/baton once per test binary run and returns its path (in a
// temporary directory of its own, left for the process's lifetime: the tests of one
// package share it).
func BatonBinary(tb testing.TB) string {
	tb.Helper()
	batonOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-bin-")
		if err != nil {
			batonErr = err
			return
		}
		batonBin = filepath.Join(dir, "baton")
		if out, err := exec.Command("go", "build", "-o", batonBin, "github.com/batonhq/baton/cmd/baton").CombinedOutput(); err != nil {
			batonErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if batonErr != nil {
		tb.Fatalf("build baton: %v", batonErr)
	}
	return batonBin
}

// CopyTree copies a data dir's regular files (with their permissions) and directories
// to to, as a backup does (a socket is not a regular file and is skipped).
func CopyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// StableListenAddr returns a loopback TCP multiaddr on a free port below Linux's
// ephemeral range (32768-60999), for a test device that restarts on the same port as a
// real one does. A port bind(0) chose comes from the ephemeral range, and once its
// device stopped, any outgoing connection of a concurrent test could take it as its
// source port: the restart then failed with "address already in use" (signer/node's
// repair tests under load, 2026-12-07).
func StableListenAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", StablePort(tb))
}

// StablePort is StableListenAddr's port: free on 127.0.0.1 when asked, below the
// ephemeral range, for a listener whose port another party must know before it
// starts (the ACME test's CA dials the challenge port it was given).
func StablePort(tb testing.TB) int {
	tb.Helper()
	start := 20000 + mrand.IntN(12000)
	for i := range 12000 {
		p := 20000 + (start-20000+i)%12000
		ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return p
	}
	tb.Fatal("no free port in 20000-31999")
	return 0
}
