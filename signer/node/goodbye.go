package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// A device that stops gracefully says so to the other members (callStopping), so
// that their logs say "member stopped" once instead of Raft's warnings of every
// failed heartbeat and replication to it until it returns: a clean Ctrl-C is not a
// fault. A crash says nothing, and the warnings stay.
const callStopping byte = 8

// goodbyeWait bounds the goodbye: the stop does not wait long for slow members (300 ms
// was too short for a loaded machine: the goodbye timed out and the leader warned as
// for a crash, CI's -race run beside a simulator sweep).
const goodbyeWait = time.Second

// departedFor is how long after its goodbye a member's own messages still come from
// the stopping process (answers in flight); later ones mean it runs again.
const departedFor = 2 * time.Second

// sayGoodbye tells every other member, at once and within goodbyeWait, that this
// device stops gracefully. Best effort: a member that does not hear it logs Raft's
// warnings as for a crash.
func (n *Node) sayGoodbye(ctx context.Context) {
	if n.net == nil {
		return
	}
	ms, err := n.log.Members()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, goodbyeWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range ms {
		if string(m.ID) == n.id {
			continue
		}
		wg.Go(func() { _, _ = n.net.Call(ctx, string(m.ID), []byte{callStopping}) })
	}
	wg.Wait()
}

// handleGoodbye records that member from stops gracefully.
func (n *Node) handleGoodbye(from string) ([]byte, error) {
	n.departed.Store(from, time.Now())
	n.logger.Info("member stopped (a graceful stop): it is not expected to answer until it runs again", "peer", from)
	return nil, nil
}

// heardFrom forgets a member's goodbye once it calls again (it runs again).
func (n *Node) heardFrom(from string) { n.departed.Delete(from) }

// namesDeparted reports whether Raft's message arguments name a member that said
// goodbye and has not been heard from since (departedFor after it). Raft names the
// member by its server ID or address, which are its peer ID.
func (n *Node) namesDeparted(args []any) bool {
	var seen map[string]time.Time
	if n.cluster != nil {
		if ps, err := n.cluster.Peers(); err == nil {
			seen = make(map[string]time.Time, len(ps))
			for _, p := range ps {
				seen[p.ID.String()] = p.LastSeen
			}
		}
	}
	named := false
	n.departed.Range(func(k, v any) bool {
		id, at := k.(string), v.(time.Time)
		if seen[id].After(at.Add(departedFor)) {
			n.departed.Delete(id) // it runs again
			return true
		}
		for i := 1; i < len(args); i += 2 {
			if strings.Contains(fmt.Sprint(args[i]), id) {
				named = true
				return false
			}
		}
		return true
	})
	return named
}
