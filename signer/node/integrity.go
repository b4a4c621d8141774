package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/batonhq/baton/intentlog"
)

// A replica can stop being trustworthy three ways: its storage fails or is corrupt
// (intentlog's Log.Fault), its state differs from the other replicas' (the digest
// check below, or the signer loop seeing the local replica contradict the leader), or
// the chain's genesis is not this device's (IdentityError). Any of them makes Health
// fail: the signer loop then neither claims, renews nor signs, and gives a held lease
// up; /healthz answers 503; State says why and how to recover.

// DivergedError: this replica's applied state differs from the other replicas'.
// Recovery: stop the device, `baton repair --data DIR`, start it: it re-syncs by a
// snapshot from the others.
type DivergedError struct {
	Msg string
}

func (e *DivergedError) Error() string {
	return e.Msg + "; this device will not claim or sign: stop it, run `baton repair --data DIR` and start it again to re-sync from the others"
}

// Unwrap makes a DivergedError match ErrDiverged.
func (e *DivergedError) Unwrap() error { return ErrDiverged }

// Health returns why this device must not sign, or nil: a storage fault, a diverged
// replica, or a chain identity mismatch.
func (n *Node) Health() error {
	if err := n.CloneError(); err != nil {
		return err
	}
	if n.loop != nil {
		if err := n.loop.Unfit(); err != nil {
			return err
		}
	}
	if p := n.identityErr.Load(); p != nil {
		return *p
	}
	if p := n.divergence.Load(); p != nil {
		return *p
	}
	if err := n.log.Fault(); err != nil {
		if errors.Is(err, intentlog.ErrRewrite) { // the leader's history differs from the one applied here
			return fmt.Errorf("%w: %w", ErrDiverged, err)
		}
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if up, why := n.fence.guards(); up {
		return fmt.Errorf("%w: %s", ErrCatchingUp, why)
	}
	return nil
}

// diverge raises the divergence alarm (once; the first reason is kept).
func (n *Node) diverge(err error) {
	var de *DivergedError
	if !errors.As(err, &de) {
		err = &DivergedError{Msg: err.Error()}
	}
	if n.divergence.CompareAndSwap(nil, &err) {
		n.logger.Error("this replica's state differs from the others'", "err", err)
	}
}

// Digest check: the replicas compare the digests of their applied state at common
// checkpoint indexes (intentlog keeps one every DigestEvery indexes), at start and
// every DigestCheckEvery.

const callDigests byte = 2

// DigestCheckEvery is how often a node compares its state digest with the others'.
const DigestCheckEvery = 30 * time.Second

// digestCheckpoints is how many of the latest checkpoints a node offers.
const digestCheckpoints = 8

type digestAnswer struct {
	Checkpoints []digestPoint `json:"checkpoints"`
}

type digestPoint struct {
	Index  uint64 `json:"index"`
	Digest string `json:"digest"` // hex
}

// localDigests returns this replica's latest checkpoints.
func (n *Node) localDigests() []digestPoint {
	idx := n.log.DigestCheckpoints()
	if len(idx) > digestCheckpoints {
		idx = idx[len(idx)-digestCheckpoints:]
	}
	var out []digestPoint
	for _, i := range idx {
		if d, ok := n.log.DigestAt(i); ok {
			out = append(out, digestPoint{Index: i, Digest: hex.EncodeToString(d[:])})
		}
	}
	return out
}

func (n *Node) handleDigests() ([]byte, error) {
	return json.Marshal(digestAnswer{Checkpoints: n.localDigests()})
}

// checkDigests asks every other member for its checkpoints and compares them at the
// latest index this replica shares with them. This replica raises the alarm when the
// replicas that disagree with it outnumber it and those that agree (a tie counts
// against it: then nobody can tell who is right, and the operator must look); a
// minority that disagrees is the minority's problem (it raises its own alarm).
func (n *Node) checkDigests(ctx context.Context) {
	mine := map[uint64]string{}
	for _, p := range n.localDigests() {
		mine[p.Index] = p.Digest
	}
	if len(mine) == 0 {
		return
	}
	ms, err := n.log.Members()
	if err != nil {
		return
	}
	theirs := map[string]map[uint64]string{}
	for _, m := range ms {
		id := string(m.ID)
		if id == n.id {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := n.net.Call(cctx, id, []byte{callDigests})
		cancel()
		if err != nil {
			continue
		}
		var a digestAnswer
		if json.Unmarshal(out, &a) != nil {
			continue
		}
		theirs[id] = map[uint64]string{}
		for _, p := range a.Checkpoints {
			theirs[id][p.Index] = p.Digest
		}
	}
	n.digestChecks.Add(1)
	switch v := digestVerdict(mine, theirs); {
	case v.alarm:
		n.diverge(&DivergedError{Msg: v.msg})
	case v.msg != "":
		n.logger.Warn("a replica's state digest differs from this one's (it raises its own alarm)", "detail", v.msg)
	}
}

type verdict struct {
	alarm bool
	msg   string
}

// digestVerdict compares this replica's checkpoints (mine) with the others' at the
// latest index mine shares with at least one of them. Alarm when those that differ
// outnumber this replica and those that agree with it, ties included.
func digestVerdict(mine map[uint64]string, theirs map[string]map[uint64]string) verdict {
	var at uint64
	found := false
	for i := range mine {
		for _, t := range theirs {
			if _, ok := t[i]; ok && (!found || i > at) {
				at, found = i, true
			}
		}
	}
	if !found {
		return verdict{}
	}
	agree, differ := 0, 0
	var ids []string
	for id := range theirs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var other string
	for _, id := range ids {
		d, ok := theirs[id][at]
		switch {
		case !ok:
		case d == mine[at]:
			agree++
		default:
			differ++
			if other == "" {
				other = shortID(id) + " has " + abbrevHex(d)
			}
		}
	}
	msg := fmt.Sprintf("state digest at index %d is %s here; %d of the %d other replicas that answered differ (%s)",
		at, abbrevHex(mine[at]), differ, agree+differ, other)
	switch {
	case differ == 0:
		return verdict{}
	case differ >= agree+1:
		return verdict{alarm: true, msg: msg}
	}
	return verdict{msg: msg}
}

func abbrevHex(s string) string {
	if len(s) > 16 {
		return s[:16]
	}
	return s
}

// keepChecking runs checkDigests at start (once the log has caught up a little) and
// every DigestCheckEvery until the node stops.
func (n *Node) keepChecking(every time.Duration) {
	t := time.NewTimer(n.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-n.ctx.Done():
			return
		}
		if n.divergence.Load() == nil {
			n.checkDigests(n.ctx)
		}
		t.Reset(every)
	}
}
