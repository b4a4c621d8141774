package intentlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"sync"

	"github.com/hashicorp/raft"
)

// Verifying a commit's signature ahead of the apply, on the leader. The leader's
// apply of an entry it proposes waits at least for its own log write's fsync, the
// replication and a follower's write: a commit entry's signature is checked on
// another goroutine meanwhile (the leader's log store starts it as the leader writes
// the batch, after sending it ahead: ahead.go), and the apply takes the result
// instead of verifying on its own goroutine (it waits for a check still running; it
// verifies itself when none was started). Started earlier, as Log.apply handed the
// entry to Raft, the check's goroutine was queued to run before Raft's leader loop
// and, on a machine of two cores, held up the leader's write by 0.1 ms of the round
// (the bench's stages trace, docs/BENCHMARKS.md as of 53ac444); during the write's fsync the
// processor is free. Followers
// verify in their apply, which is off the path of the proposer's answer: starting
// their checks at their log write would put that CPU inside the round (on the log
// write's path) for nothing.
//
// The verifier is a pure function of the commit's bytes, so the apply sees exactly
// what it would have computed: the apply stays deterministic. A result is used once,
// for the same bytes (compared in full), and then forgotten.

// preverifyMax bounds the checks kept (started and not yet taken by the apply): the
// oldest are forgotten beyond it (a follower's entries that Raft truncated are never
// applied).
const preverifyMax = 1024

// preverifyMaxBytes bounds the commit bytes those checks keep (a commit may carry
// megabytes).
const preverifyMaxBytes = 64 << 20

var errVerifyPanicked = errors.New("intentlog: commit verifier panicked")

type preverifier struct {
	verify CommitVerifier

	mu    sync.Mutex
	m     map[[32]byte]*precheck
	order [][32]byte // insertion order, for the bounds
	bytes int        // commit bytes of the checks in m
}

type precheck struct {
	raw  []byte
	done chan struct{}
	info CommitInfo
	err  error
}

func newPreverifier(verify CommitVerifier) *preverifier {
	if verify == nil {
		return nil
	}
	return &preverifier{verify: verify, m: map[[32]byte]*precheck{}}
}

// start begins a check of every commit entry of logs that is not being checked yet.
func (p *preverifier) start(logs []*raft.Log) {
	if p == nil {
		return
	}
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			p.startData(l.Data)
		}
	}
}

// startData begins a check of the encoded entry data if it is a commit entry not
// being checked yet.
func (p *preverifier) startData(data []byte) {
	if p == nil || len(data) < 2 || data[0] != CodecVersion && data[0] != CodecVersionV3 || data[1] != kindCommit {
		return // not a commit: nothing to check (and an intents entry is not decoded for nothing)
	}
	e, err := Decode(data)
	if err != nil {
		return
	}
	ce, ok := e.(CommitEntry)
	if !ok {
		return
	}
	k := sha256.Sum256(ce.Raw)
	p.mu.Lock()
	if _, dup := p.m[k]; dup {
		p.mu.Unlock()
		return
	}
	c := &precheck{raw: ce.Raw, done: make(chan struct{})}
	p.m[k] = c
	p.bytes += len(c.raw)
	p.order = append(p.order, k)
	for len(p.order) > preverifyMax || p.bytes > preverifyMaxBytes {
		if old := p.m[p.order[0]]; old != nil {
			delete(p.m, p.order[0])
			p.bytes -= len(old.raw)
		}
		p.order = p.order[1:]
	}
	p.mu.Unlock()
	go c.run(p.verify)
}

func (c *precheck) run(verify CommitVerifier) {
	defer close(c.done)
	defer func() {
		if recover() != nil {
			c.info, c.err = CommitInfo{}, errVerifyPanicked
		}
	}()
	c.info, c.err = verify(c.raw)
}

// verifier returns the CommitVerifier the apply uses: a check started for the same
// bytes, else verify itself.
func (p *preverifier) verifier() CommitVerifier {
	if p == nil {
		return nil
	}
	return func(raw []byte) (CommitInfo, error) {
		k := sha256.Sum256(raw)
		p.mu.Lock()
		c := p.m[k]
		if c != nil {
			delete(p.m, k) // used once; its order slot is dropped with the bounds
			p.bytes -= len(c.raw)
		}
		p.mu.Unlock()
		if c == nil || !bytes.Equal(c.raw, raw) {
			return p.verify(raw)
		}
		<-c.done
		if errors.Is(c.err, errVerifyPanicked) {
			panic(c.err) // as the verifier did: verifySafely refuses the commit
		}
		return c.info, c.err
	}
}
