package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// Devices have human names (Config.Name: `baton run --name laptop`, by default the
// host's name) besides their 52-character peer IDs. Each device asks the members for
// theirs (callName) and keeps what it learned in NamesFile, so that status, members,
// logs and metrics name members that are down too. A name is a label for people, not
// an identity: two devices may share one, and nothing is decided by it.

// callName asks a member for its name.
const callName byte = 11

// NamesFile keeps the members' names this device learned (inside the data dir).
const NamesFile = "names.json"

// NamesEvery is how often a device asks the members for their names.
const NamesEvery = 30 * time.Second

// MaxNameLen bounds a device name.
const MaxNameLen = 32

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidName checks a device name: 1 to MaxNameLen letters, digits, '.', '_' or '-',
// starting with a letter or digit.
func ValidName(s string) error {
	if len(s) > MaxNameLen || !validName.MatchString(s) {
		return fmt.Errorf("%w: device name %q: 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", ErrBadConfig, s, MaxNameLen)
	}
	return nil
}

// DefaultName is a device's name when none is given: the host's name up to its first
// dot, made valid ("" when there is none).
func DefaultName() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	for i, r := range h {
		if r == '.' {
			h = h[:i]
			break
		}
	}
	if len(h) > MaxNameLen {
		h = h[:MaxNameLen]
	}
	if ValidName(h) != nil {
		return ""
	}
	return h
}

// names is what this device knows of the members' names.
type names struct {
	path  string
	mu    sync.Mutex
	m     map[string]string    // peer ID -> name
	asked map[string]time.Time // when a member without a known name was last asked

	self, selfName string // this device (for the logs' names: lognames.go)
}

// nameless records that member id answered without a valid name (a device without
// one): it is asked again only once a NamesEvery, not every few seconds.
func (ns *names) nameless(id string, now time.Time) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.asked == nil {
		ns.asked = map[string]time.Time{}
	}
	ns.asked[id] = now
}

// askNow reports whether member id, whose name is unknown, is to be asked now.
func (ns *names) askNow(id string, now time.Time) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	at, ok := ns.asked[id]
	return !ok || now.Sub(at) >= NamesEvery
}

func loadNames(dir string) *names {
	ns := &names{path: filepath.Join(dir, NamesFile), m: map[string]string{}}
	if b, err := os.ReadFile(ns.path); err == nil {
		_ = json.Unmarshal(b, &ns.m) // a missing or damaged file is relearned from the members
	}
	return ns
}

func (ns *names) get(id string) string {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.m[id]
}

// set records id's name and saves the file when it changed.
func (ns *names) set(id, name string) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.m[id] == name {
		return nil
	}
	ns.m[id] = name
	b, err := json.Marshal(ns.m)
	if err != nil {
		return err
	}
	tmp := ns.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, ns.path)
}

// Name returns this device's name ("" when it has none).
func (n *Node) Name() string { return n.cfg.Name }

// NameOf returns the name member id gave ("" when unknown); this device's own too.
func (n *Node) NameOf(id string) string {
	if id == n.id {
		return n.cfg.Name
	}
	if n.names == nil {
		return ""
	}
	return n.names.get(id)
}

// keepNames asks the members whose names it does not know every few seconds (a
// member that just joined), and every member once a NamesEvery (a rename), until the
// node stops.
func (n *Node) keepNames() {
	t := time.NewTicker(namesUnknownEvery)
	defer t.Stop()
	var all time.Time
	for {
		// The first round waits a tick too: a device that just joined knows the
		// others before they have applied its addition, and they refuse (and log) a
		// call from a device they do not know yet.
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		everyone := now.Sub(all) >= NamesEvery
		if everyone {
			all = now
		}
		n.askNames(everyone)
	}
}

// namesUnknownEvery is how often a device asks the members whose names it lacks.
const namesUnknownEvery = 2 * time.Second

// askNames asks every other member for its name (all), or those whose name is unknown.
func (n *Node) askNames(all bool) {
	ms, err := n.log.Members()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range ms {
		id := string(m.ID)
		if id == n.id || !all && (n.names.get(id) != "" || !n.names.askNow(id, time.Now())) {
			continue
		}
		wg.Go(func() {
			b, err := n.net.Call(ctx, id, []byte{callName})
			if err != nil {
				return // asked again in a few seconds (a member that just joined may not know this one yet)
			}
			if ValidName(string(b)) != nil {
				n.names.nameless(id, time.Now())
				return
			}
			if old := n.names.get(id); old != string(b) {
				if err := n.names.set(id, string(b)); err != nil {
					n.logger.Debug("could not save the members' names", "err", err)
				}
				if old != "" {
					n.logger.Info("member renamed", "peer", shortID(id), "from", old, "to", string(b))
				}
			}
		})
	}
	wg.Wait()
}

// handleName answers a member's callName.
func (n *Node) handleName() ([]byte, error) { return []byte(n.cfg.Name), nil }
