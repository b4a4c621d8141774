package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/batonhq/baton/signer/node"
)

// notifyReady tells systemd (Type=notify, NOTIFY_SOCKET set) how the device is doing
// until ctx ends: STATUS= lines as it changes, and READY=1 once it has caught up with
// the cluster (readiness, below). Without NOTIFY_SOCKET it returns at once.
func notifyReady(ctx context.Context, n *node.Node, logger *slog.Logger) {
	if ok, err := daemon.SdNotify(false, "STATUS=starting"); !ok || err != nil {
		if err != nil {
			logger.Warn("could not tell systemd the status", "err", err)
		}
		return // not under systemd's Type=notify
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	ready, last := false, ""
	for {
		st := n.State()
		ok, status := readiness(st)
		if status != last {
			_, _ = daemon.SdNotify(false, "STATUS="+status)
			last = status
		}
		if ok && !ready {
			ready = true
			_, _ = daemon.SdNotify(false, daemon.SdNotifyReady)
			logger.Info("told systemd the device is ready", "status", status)
		}
		select {
		case <-ctx.Done():
			_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
			return
		case <-t.C:
		}
	}
}

// readiness is whether a device has caught up with its cluster (healthy, a leader
// heard, its applied index at the commit index it knows) and a one-line status.
func readiness(st node.State) (bool, string) {
	switch {
	case !st.Healthy:
		return false, "not ready: " + st.Problem
	case !st.Quorum.OK:
		return false, fmt.Sprintf("waiting for a quorum: %d of %d voters reachable, %d needed", st.Quorum.Reachable, st.Quorum.Voters, st.Quorum.Needed)
	case st.Raft.AppliedIndex < st.Raft.CommitIndex:
		return false, fmt.Sprintf("catching up: applied %d of %d", st.Raft.AppliedIndex, st.Raft.CommitIndex)
	}
	role := "replica"
	if st.Lease.Holder == st.ID {
		role = "holder"
	} else if st.Signer {
		role = "standby"
	}
	return true, fmt.Sprintf("ready: %s, head seq %d, %d members", role, st.Head.Seq, st.Members)
}
