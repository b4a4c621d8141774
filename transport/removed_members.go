package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// A device removed from the configuration while it was down restarts with the old
// configuration, which still names it: it would stand for election forever, refused
// by every member (a zombie). etcd answers such a member "permanently removed from
// the cluster"; here every member that saw the removal keeps a tombstone (the peer and
// the index of the first configuration without it), admits the removed device's
// connections (it is served no member protocol, like a joining device) and tells it,
// over RemovedProtocol, at which configuration index it was removed. The removed
// device believes it only when the teller is a member of its own configuration and
// that configuration is older than the removal (a device that joined again since has
// a newer one): Cluster.RemovedNotice then reports it and the node stops.

// RemovedProtocol carries "you were removed at configuration index N" from a member
// to a removed device that connects.
const RemovedProtocol protocol.ID = "/baton/removed/1.0.0"

// RemovedMembersFile holds the tombstones of members removed while this device was a
// member (inside the data dir).
const RemovedMembersFile = "removed-members.json"

type tombstoneFormat struct {
	Version int               `json:"version"`
	Removed map[string]uint64 `json:"removed"` // peer ID -> configuration index of its removal
}

// tombstones are the members removed while this device was a member. Safe for
// concurrent use; every change is persisted.
type tombstones struct {
	path string
	mu   sync.Mutex
	m    map[peer.ID]uint64
}

func loadTombstones(dir string) (*tombstones, error) {
	t := &tombstones{path: filepath.Join(dir, RemovedMembersFile), m: map[peer.ID]uint64{}}
	raw, err := os.ReadFile(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read removed members: %w", err)
	}
	var f tombstoneFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("parse removed members %s: %w", t.path, err)
	}
	for id, idx := range f.Removed {
		p, err := peer.Decode(id)
		if err != nil {
			return nil, fmt.Errorf("parse removed members %s: peer %q: %w", t.path, id, err)
		}
		t.m[p] = idx
	}
	return t, nil
}

// index returns the configuration index at which p was removed.
func (t *tombstones) index(p peer.ID) (uint64, bool) {
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx, ok := t.m[p]
	return idx, ok
}

// set records p's removal at idx (a later removal replaces an earlier one); clear
// (idx 0) forgets it, as when p is a member again.
func (t *tombstones) set(p peer.ID, idx uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.m[p]
	switch {
	case idx == 0 && !ok, idx != 0 && ok && old >= idx:
		return nil
	case idx == 0:
		delete(t.m, p)
	default:
		t.m[p] = idx
	}
	f := tombstoneFormat{Version: 1, Removed: map[string]uint64{}}
	for q, i := range t.m {
		f.Removed[q.String()] = i
	}
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(t.path, raw, 0o600)
}

// removedNotice is what a removed device learned: at which configuration index it
// was removed, and from whom.
type removedNotice struct {
	Index uint64 `json:"index"`
	From  string `json:"-"`
}

// RemovedNotice reports whether a member told this device that it was removed from
// the configuration (see RemovedProtocol), with the configuration index of the
// removal and the member that told it.
func (c *Cluster) RemovedNotice() (index uint64, from peer.ID, ok bool) {
	n := c.removedNotice.Load()
	if n == nil {
		return 0, "", false
	}
	p, _ := peer.Decode(n.From)
	return n.Index, p, true
}

// startRemovedNotices loads the tombstones, serves RemovedProtocol and tells every
// removed device that connects.
func (c *Cluster) startRemovedNotices() error {
	t, err := loadTombstones(c.h.cfg.DataDir)
	if err != nil {
		return err
	}
	c.h.gater.setTombstones(t)
	c.h.h.SetStreamHandler(RemovedProtocol, c.handleRemoved)
	var mu sync.Mutex // Close's StopNotify, then no more goroutines (wg)
	stopped := false
	nb := &network.NotifyBundle{ConnectedF: func(_ network.Network, conn network.Conn) {
		p := conn.RemotePeer()
		idx, ok := t.index(p)
		if !ok || c.h.gater.isMember(p) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.tellRemoved(p, idx)
		}()
	}}
	c.h.h.Network().Notify(nb)
	c.stopRemoved = func() {
		c.h.h.Network().StopNotify(nb)
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
	return nil
}

// tellRemoved tells p it was removed at idx: a few attempts while p stays connected
// (its handler may not be up yet: a node dials its members before its Cluster runs).
func (c *Cluster) tellRemoved(p peer.ID, idx uint64) {
	wait := 200 * time.Millisecond
	for attempt := 0; attempt < 8; attempt++ {
		if c.ctx.Err() != nil || c.h.h.Network().Connectedness(p) != network.Connected {
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		err := c.sendRemoved(ctx, p, idx)
		cancel()
		if err == nil {
			c.log.Info("told a removed device that it was removed", "peer", p, "config_index", idx)
			return
		}
		if errors.Is(err, errRemovedDeclined) {
			return // it is a member again, or joining anew
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

var errRemovedDeclined = errors.New("removed notice declined")

func (c *Cluster) sendRemoved(ctx context.Context, p peer.ID, idx uint64) error {
	s, err := c.h.newStream(ctx, p, RemovedProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	_ = s.SetDeadline(deadlineOr(ctx, 5*time.Second))
	if err := json.NewEncoder(s).Encode(removedNotice{Index: idx}); err != nil {
		_ = s.Reset()
		return err
	}
	_ = s.CloseWrite()
	ans, err := io.ReadAll(io.LimitReader(s, 64))
	if err != nil {
		return err
	}
	if string(ans) != "ok" {
		return errRemovedDeclined
	}
	return nil
}

// handleRemoved believes a notice only from a member of this device's own
// configuration, and only when that configuration still names this device and is
// older than the removal.
func (c *Cluster) handleRemoved(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	var n removedNotice
	if err := json.NewDecoder(io.LimitReader(s, 256)).Decode(&n); err != nil {
		_ = s.Reset()
		return
	}
	f := c.r.GetConfiguration()
	if err := f.Error(); err != nil {
		_ = s.Reset() // not ready: the member tries again
		return
	}
	self, fromIn := false, false
	for _, sv := range f.Configuration().Servers {
		switch string(sv.ID) {
		case c.h.ID().String():
			self = true
		case from.String():
			fromIn = true
		}
	}
	own := c.configIndex(f)
	if !self || !fromIn || n.Index <= own {
		c.log.Info("ignored a removal notice", "from", from, "config_index", n.Index, "own_config_index", own, "self_in_config", self, "teller_in_config", fromIn)
		_, _ = s.Write([]byte("no"))
		return
	}
	n.From = from.String()
	c.removedNotice.CompareAndSwap(nil, &n)
	c.log.Warn("a member says this device was removed from the cluster", "from", from, "config_index", n.Index, "own_config_index", own)
	_, _ = s.Write([]byte("ok"))
}

// configIndex is an index at or past the configuration f (the latest one): f's own
// index, or, as hashicorp/raft v1.7.3's GetConfiguration leaves it 0 (its future is
// answered without the index), the last index of the local log, which holds that
// configuration's entry. A removal recorded at index 0 would delete the tombstone
// (tombstones.set), and a notice compared with 0 would always be believed.
func (c *Cluster) configIndex(f raft.ConfigurationFuture) uint64 {
	return max(f.Index(), c.r.LastIndex())
}

// admitRemoved reports whether an inbound connection from p is admitted because p
// is a removed member (to be told so).
func (g *gater) admitRemoved(p peer.ID) bool {
	g.mu.RLock()
	t := g.tombs
	g.mu.RUnlock()
	_, ok := t.index(p)
	return ok
}

func (g *gater) setTombstones(t *tombstones) {
	g.mu.Lock()
	g.tombs = t
	g.mu.Unlock()
}

// noteRemovedMember records p's removal at the configuration index idx (tombstone),
// or forgets it (idx 0) when p is a member again.
func (c *Cluster) noteRemovedMember(p peer.ID, idx uint64) {
	c.h.gater.mu.RLock()
	t := c.h.gater.tombs
	c.h.gater.mu.RUnlock()
	if t == nil {
		return
	}
	if err := t.set(p, idx); err != nil {
		c.log.Error("record removed member", "peer", p, "err", err)
	}
}

// RemovedMembers returns the members removed while this device was a member (its
// tombstones): each peer with the index of the first configuration without it.
func (c *Cluster) RemovedMembers() map[peer.ID]uint64 {
	c.h.gater.mu.RLock()
	t := c.h.gater.tombs
	c.h.gater.mu.RUnlock()
	out := map[peer.ID]uint64{}
	if t == nil {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.Copy(out, t.m)
	return out
}
