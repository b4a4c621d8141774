package testnet

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
)

// SignedCommit is one distinct commit the chain key signed, as found in the devices'
// Raft logs (whether the apply accepted it or not).
type SignedCommit struct {
	Seq    uint64   `json:"seq"`
	Epoch  uint64   `json:"epoch"`
	Signer string   `json:"signer"` // peer ID
	Hash   string   `json:"hash"`   // hex of the format's Hash (the link hash)
	Index  uint64   `json:"index"`  // Raft index where first seen
	Logs   []string `json:"logs"`   // devices whose Raft log held it
	// At is the earliest AppendedAt of its entry: when a leader appended it.
	At time.Time `json:"at"`
}

// sigBook collects every signed commit of every device's Raft log, across reads
// (a device's log is read from where the last read stopped, so that compaction and
// wiped state lose as little as possible).
type sigBook struct {
	mu         sync.Mutex
	commits    map[[chain.HashSize]byte]*SignedCommit
	entries    int                 // commit entries read (the same commit in several logs counts each time)
	unverified []Finding           // commit entries the chain's format refused (chain.VerifyOf)
	read       map[string][]span64 // device -> Raft index ranges read
	errs       []string
}

type span64 struct{ from, to uint64 }

func newSigBook() *sigBook {
	return &sigBook{commits: map[[chain.HashSize]byte]*SignedCommit{}, read: map[string][]span64{}}
}

// add books one Raft entry of device's log.
func (b *sigBook) add(device string, e intentlog.RaftEntry, did string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rs := b.read[device]
	if n := len(rs); n > 0 && rs[n-1].to+1 >= e.Index && rs[n-1].from <= e.Index {
		rs[n-1].to = max(rs[n-1].to, e.Index)
	} else {
		rs = append(rs, span64{e.Index, e.Index})
	}
	b.read[device] = rs
	ce, ok := e.Entry.(intentlog.CommitEntry)
	if !ok {
		return
	}
	b.entries++
	f := FormatOf(did)
	c, err := chain.VerifyOf(f, ce.Raw, did)
	if err != nil {
		if len(b.unverified) < 50 {
			b.unverified = append(b.unverified, Finding{Kind: FindingUnverified, Device: device,
				Detail: fmt.Sprintf("raft index %d: %v", e.Index, err)})
		}
		return
	}
	h := f.Hash(ce.Raw)
	sc := b.commits[h]
	if sc == nil {
		sc = &SignedCommit{Seq: c.Seq, Epoch: c.Epoch, Signer: c.Signer, Hash: fmt.Sprintf("%x", h[:]), Index: e.Index, At: e.AppendedAt}
		b.commits[h] = sc
	}
	if !e.AppendedAt.IsZero() && (sc.At.IsZero() || e.AppendedAt.Before(sc.At)) {
		sc.At = e.AppendedAt
	}
	for _, l := range sc.Logs {
		if l == device {
			return
		}
	}
	sc.Logs = append(sc.Logs, device)
}

func (b *sigBook) readError(device string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) < 20 {
		b.errs = append(b.errs, device+": "+err.Error())
	}
}

// signatures returns what was booked: the distinct signed commits ordered by seq,
// epoch and first index, and the coverage of the logs.
func (b *sigBook) signatures() Signatures {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Signatures{Entries: b.entries, ReadErrors: append([]string(nil), b.errs...),
		Unverified: append([]Finding(nil), b.unverified...)}
	for _, sc := range b.commits {
		c := *sc
		c.Logs = append([]string(nil), sc.Logs...)
		sort.Strings(c.Logs)
		s.Commits = append(s.Commits, c)
	}
	sort.Slice(s.Commits, func(i, j int) bool {
		a, c := s.Commits[i], s.Commits[j]
		if a.Seq != c.Seq {
			return a.Seq < c.Seq
		}
		if a.Epoch != c.Epoch {
			return a.Epoch < c.Epoch
		}
		return a.Index < c.Index
	})
	// Coverage: Raft indexes up to the highest read that no device's read covered
	// (compacted before a read, or truncated with a device's uncommitted suffix).
	var all []span64
	for _, rs := range b.read {
		all = append(all, rs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].from < all[j].from })
	var next uint64 = 1
	for _, r := range all {
		if r.from > next {
			s.Unread += r.from - next
		}
		if r.to+1 > next {
			next = r.to + 1
		}
	}
	if next > 1 {
		s.MaxIndex = next - 1
	}
	return s
}

// Signatures is what the Raft logs held: every distinct commit the chain key signed.
type Signatures struct {
	Commits []SignedCommit `json:"commits"`
	// Entries counts the Commit entries read (one commit in three logs counts 3).
	Entries int `json:"entries"`
	// MaxIndex is the highest Raft index read; Unread counts indexes below it that
	// no read covered: entries compacted into a snapshot before they were read (a
	// snapshot installed on a lagging device skips them too). Signatures among them
	// were not seen, so equivocation and refusal counts are lower bounds.
	MaxIndex uint64 `json:"max_index"`
	Unread   uint64 `json:"unread"`
	// Unverified are Commit entries whose bytes the chain's format refused.
	Unverified []Finding `json:"unverified,omitempty"`
	ReadErrors []string  `json:"read_errors,omitempty"`
}
