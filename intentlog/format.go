package intentlog

import (
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Commit formats a genesis may declare (GenesisEntry.Version). The apply checks the
// fence (holder, epoch, seq, prev) of every format the same way; a stateful format
// (atproto) also checks each commit against its own replicated state through the
// CommitInfo.Step its verifier returns, and keeps that state in the same transaction.
const (
	// CommitFormatAtproto is the atproto format (package signer/chain/atproto): an
	// atproto repo commit v3 in an envelope carrying the fence.
	CommitFormatAtproto = 3
)

// ReasonBadRepo: a stateful format refused a commit that passed the fence (atproto:
// prevData, rev order, op prev CIDs or the recomputed MST root).
const ReasonBadRepo Reason = "bad_repo"

// knownFormat reports whether a genesis may declare commit format v.
func knownFormat(v uint64) bool { return v == CommitFormatVersion || v == CommitFormatAtproto }

// FormatStore is a stateful format's state as its Step reads it: blocks by key (a CID)
// and the format's head, both in the apply's transaction.
type FormatStore interface {
	Block(key []byte) []byte // nil when absent
	Head() []byte            // nil before the format's first commit
}

// FormatBlock is a block a Step adds.
type FormatBlock struct {
	Key  []byte
	Data []byte
}

// FormatStep is a stateful format's check of one commit against its state. It returns
// the new head and the blocks to add, or an error (the commit is refused with
// ReasonBadRepo). It must be deterministic: it reads only its commit and st.
type FormatStep func(st FormatStore) (head []byte, blocks []FormatBlock, err error)

// The format state lives in the meta bucket beside "state" (no layout change: an
// old state has none of these keys): the head at formatHeadKey, blocks at
// formatBlockPrefix + key.
var (
	formatHeadKey     = []byte("format/head")
	formatBlockPrefix = []byte("format/b/")
)

func formatBlockKey(k []byte) []byte {
	return append(append(make([]byte, 0, len(formatBlockPrefix)+len(k)), formatBlockPrefix...), k...)
}

// chainFormat is the commit format of the chain (formatOf its genesis).
func (a *applier) chainFormat() uint64 { return formatOf(a.m.Genesis) }

// formatOf is the commit format of a chain with genesis g: the genesis's, or version
// 1 for a legacy log without one.
func formatOf(g Genesis) uint64 {
	if g.Index == 0 {
		return CommitFormatVersion
	}
	return g.Version
}

// ChainFormat is the commit format of the chain this view belongs to.
func (v View) ChainFormat() uint64 { return formatOf(v.Genesis) }

// formatUpdate is what an accepted commit writes into the format state.
type formatUpdate struct {
	head   []byte
	blocks []FormatBlock
}

// formatCheck checks that the commit is in the chain's format and, for a stateful
// format, runs its Step (no writes: formatWrite does them once the commit is accepted).
func (a *applier) formatCheck(info CommitInfo) (*formatUpdate, Reason) {
	f := info.Format
	if f == 0 {
		f = CommitFormatVersion
	}
	if f != a.chainFormat() {
		return nil, ReasonBadChain
	}
	if info.Step == nil {
		if f != CommitFormatVersion {
			return nil, ReasonBadSignature // a stateful format's verifier always gives a step
		}
		return nil, ""
	}
	head, blocks, err := runStep(info.Step, txFormatStore{a})
	if err != nil {
		return nil, ReasonBadRepo
	}
	return &formatUpdate{head: head, blocks: blocks}, ""
}

// runStep runs a step; a step that panics refuses the commit (deterministically: it
// panics on every replica).
func runStep(step FormatStep, st FormatStore) (head []byte, blocks []FormatBlock, err error) {
	defer func() {
		if r := recover(); r != nil {
			head, blocks, err = nil, nil, fmt.Errorf("format step panicked: %v", r)
		}
	}()
	return step(st)
}

func (a *applier) formatWrite(u *formatUpdate) {
	if u == nil {
		return
	}
	for _, b := range u.blocks {
		a.put(bMeta, formatBlockKey(b.Key), b.Data)
	}
	a.put(bMeta, formatHeadKey, u.head)
}

// txFormatStore reads the format state in the apply's transaction.
type txFormatStore struct{ a *applier }

func (s txFormatStore) Block(k []byte) []byte { return s.a.get(bMeta, formatBlockKey(k)) }
func (s txFormatStore) Head() []byte          { return s.a.get(bMeta, formatHeadKey) }

// ReadFormat calls fn with the applied format state (a read transaction): the blocks
// and head of a stateful format's chain (atproto: the repository), for export.
func (f *FSM) ReadFormat(fn func(FormatStore) error) error {
	return f.read(func(tx *bolt.Tx) error {
		s := &readFormatStore{tx: tx}
		if err := fn(s); err != nil {
			return err
		}
		return s.err
	})
}

// readFormatStore reads the format state; a value that does not verify reads as
// absent and makes ReadFormat fail.
type readFormatStore struct {
	tx  *bolt.Tx
	err error
}

func (s *readFormatStore) get(k []byte) []byte {
	v := s.tx.Bucket(bMeta).Get(k)
	if v == nil {
		return nil
	}
	p, err := openStored(bMeta, k, v)
	if err != nil {
		if s.err == nil {
			s.err = &FaultError{File: StateFile, Key: keyName(bMeta, k), Err: err}
		}
		return nil
	}
	return append([]byte(nil), p...)
}

func (s *readFormatStore) Block(k []byte) []byte { return s.get(formatBlockKey(k)) }
func (s *readFormatStore) Head() []byte          { return s.get(formatHeadKey) }

// intentRules are the formats' own rules for an intent (atproto: a record path and a
// DAG-CBOR record), registered once at init by the package that knows the format.
// Every replica runs one build, so every replica applies the same rules.
var (
	intentRulesMu sync.RWMutex
	intentRules   = map[uint64]func(Intent) error{}
)

// RegisterIntentRule makes the apply refuse (ReasonBadIntent) an intent that rule
// refuses on a chain of format f: an intent the holder could never sign must not
// enter the pending queue, where it would stop the chain.
func RegisterIntentRule(f uint64, rule func(Intent) error) {
	intentRulesMu.Lock()
	defer intentRulesMu.Unlock()
	intentRules[f] = rule
}

// genesisRules are the formats' rules for a genesis that names the chain's state
// (GenesisEntry.Repo), registered once at init like the intent rules.
var (
	genesisRulesMu sync.RWMutex
	genesisRules   = map[uint64]func(repo string) ([]byte, error){}
)

// RegisterGenesisRule makes the apply accept a genesis of format f that names its
// state (GenesisEntry.Repo) when rule accepts the name: rule returns the format head
// the chain starts from (atproto: an empty repository that has its DID), stored with
// the genesis. rule must be deterministic. A genesis naming its state on a format
// without a rule, or one rule refuses, is refused (ReasonBadEntry).
func RegisterGenesisRule(f uint64, rule func(repo string) (head []byte, err error)) {
	genesisRulesMu.Lock()
	defer genesisRulesMu.Unlock()
	genesisRules[f] = rule
}

// genesisHead is the format head a genesis naming its state starts the chain with
// (nil, "" for a genesis that names none; ReasonBadEntry when the name is refused).
func (a *applier) genesisHead(e GenesisEntry) ([]byte, Reason) {
	if e.Repo == "" {
		return nil, ""
	}
	genesisRulesMu.RLock()
	rule := genesisRules[e.Version]
	genesisRulesMu.RUnlock()
	if rule == nil || a.get(bMeta, formatHeadKey) != nil {
		return nil, ReasonBadEntry
	}
	head, err := runGenesisRule(rule, e.Repo)
	if err != nil || head == nil {
		return nil, ReasonBadEntry
	}
	return head, ""
}

func runGenesisRule(rule func(string) ([]byte, error), repo string) (head []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			head, err = nil, fmt.Errorf("genesis rule panicked: %v", r)
		}
	}()
	return rule(repo)
}

// formatIntent applies the chain format's intent rule: "" or ReasonBadIntent.
func (a *applier) formatIntent(in Intent) Reason {
	if formatRule(a.chainFormat(), in) != nil {
		return ReasonBadIntent
	}
	return ""
}

// formatRule is the intent rule of commit format f (nil for baton's own, whose rule
// is ValidateIntent's alone).
func formatRule(f uint64, in Intent) *IntentError {
	if f == CommitFormatVersion {
		return nil
	}
	intentRulesMu.RLock()
	rule := intentRules[f]
	intentRulesMu.RUnlock()
	if rule == nil {
		return intentErr(ReasonBadIntent, "this build cannot sign intents for commit format %d", f)
	}
	if err := rule(in); err != nil {
		return intentErr(ReasonBadIntent, "%v", err)
	}
	return nil
}

// ValidateIntentIn is the apply's whole rule for an intent on a chain of commit
// format f (View.ChainFormat): ValidateIntent, then the format's own rule. Every
// entrance calls it, so that a client cannot make the holder sign what the apply
// refuses on that chain (an atproto record that is not DAG-CBOR, say).
func ValidateIntentIn(f uint64, in Intent) error {
	if err := ValidateIntent(in); err != nil {
		return err
	}
	if e := formatRule(f, in); e != nil {
		return e
	}
	return nil
}

// ReadFormat calls fn with the locally applied format state (FSM.ReadFormat): what a
// stateful format's holder signs on top of.
func (l *Log) ReadFormat(fn func(FormatStore) error) error { return l.fsm.ReadFormat(fn) }
