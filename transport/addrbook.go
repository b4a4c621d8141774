package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// AddrBookFile is the name of the member address book inside the data dir.
const AddrBookFile = "members.json"

// addrBookFormat is the on-disk JSON shape of the address book.
type addrBookFormat struct {
	Version int                 `json:"version"`
	Members map[string][]string `json:"members"` // peer ID -> multiaddrs (without /p2p)
}

// addrBook maps member peer IDs to their addresses and persists every change to
// <dir>/members.json atomically. Safe for concurrent use.
type addrBook struct {
	path string

	mu      sync.Mutex
	members map[peer.ID][]ma.Multiaddr
}

// loadAddrBook reads the address book, or starts an empty one when the file does not
// exist. A file that exists but does not parse is an error (never silently reset).
func loadAddrBook(dir string) (*addrBook, error) {
	b := &addrBook{path: filepath.Join(dir, AddrBookFile), members: map[peer.ID][]ma.Multiaddr{}}
	raw, err := os.ReadFile(b.path)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read address book: %w", err)
	}
	var f addrBookFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("parse address book %s: %w", b.path, err)
	}
	for id, addrs := range f.Members {
		p, err := peer.Decode(id)
		if err != nil {
			return nil, fmt.Errorf("parse address book %s: peer %q: %w", b.path, id, err)
		}
		var as []ma.Multiaddr
		for _, s := range addrs {
			a, err := ma.NewMultiaddr(s)
			if err != nil {
				return nil, fmt.Errorf("parse address book %s: addr %q: %w", b.path, s, err)
			}
			as = append(as, a)
		}
		b.members[p] = as
	}
	return b, nil
}

// all returns a copy of the book.
func (b *addrBook) all() map[peer.ID][]ma.Multiaddr {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[peer.ID][]ma.Multiaddr, len(b.members))
	for p, as := range b.members {
		out[p] = slices.Clone(as)
	}
	return out
}

func (b *addrBook) has(p peer.ID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.members[p]
	return ok
}

// set records p's addresses (replacing earlier ones when addrs is non-empty) and
// persists the book when it changed.
func (b *addrBook) set(p peer.ID, addrs []ma.Multiaddr) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.members[p]
	if ok && (len(addrs) == 0 || sameAddrs(old, addrs)) {
		return nil
	}
	if len(addrs) == 0 {
		addrs = nil
	}
	b.members[p] = slices.Clone(addrs)
	return b.saveLocked()
}

// remove forgets p and persists the book when it changed.
func (b *addrBook) remove(p peer.ID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.members[p]; !ok {
		return nil
	}
	delete(b.members, p)
	return b.saveLocked()
}

func (b *addrBook) saveLocked() error {
	f := addrBookFormat{Version: 1, Members: map[string][]string{}}
	for p, as := range b.members {
		ss := make([]string, 0, len(as))
		for _, a := range as {
			ss = append(ss, a.String())
		}
		f.Members[p.String()] = ss
	}
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode address book: %w", err)
	}
	if err := writeFileAtomic(b.path, raw, 0o600); err != nil {
		return fmt.Errorf("write address book: %w", err)
	}
	return nil
}

func sameAddrs(a, b []ma.Multiaddr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
