package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signalContext()
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// signalContext returns a context cancelled by the first SIGINT or SIGTERM (graceful
// stop: a running node releases its lease and closes in order). A second signal aborts
// the process at once, for when the graceful path hangs (no quorum to write a release).
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		fmt.Fprintln(os.Stderr, "baton: stopping (signal again to abort)")
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "baton: aborted")
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}
