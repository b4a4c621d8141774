package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/batonhq/baton/signer/chain"
)

// recordingKey is one device's handle on the chain key (the same key on every
// device): it signs with it and records every signature it makes, so that every
// commit the key ever signed is known, applied or not.
type recordingKey struct {
	key  chain.Key
	dev  int
	sigs *signatures
}

var _ chain.Key = (*recordingKey)(nil)

func (k *recordingKey) DID() string { return k.key.DID() }

func (k *recordingKey) Sign(msg []byte) ([]byte, error) {
	sig, err := k.key.Sign(msg)
	if err == nil {
		k.sigs.record(k.dev, msg)
	}
	return sig, err
}

// signedCommit is what the recorder knows of one signature.
type signedCommit struct {
	dev    int
	seq    uint64
	epoch  uint64
	ops    int
	digest [32]byte // SHA-256 of the signed bytes (the commit without sig)
	at     time.Duration
	rev    string // an atproto repository commit's rev (format.go)
	fast   int    // devices whose clocks ran more than fastClock ahead when it was signed
}

// signatures is the record of every signature, checked as it is made: never two
// different commits for one (seq, epoch).
type signatures struct {
	w  *world
	mu sync.Mutex
	// first signature of each (seq, epoch), and every signature by digest
	bySlot  map[[2]uint64]signedCommit
	all     map[[32]byte]signedCommit
	applied map[[32]byte]bool
}

func newSignatures(w *world) *signatures {
	return &signatures{w: w, bySlot: map[[2]uint64]signedCommit{}, all: map[[32]byte]signedCommit{},
		applied: map[[32]byte]bool{}}
}

// signedFields is the part of the commit encoding the recorder reads.
type signedFields struct {
	Seq   uint64 `cbor:"seq"`
	Epoch uint64 `cbor:"epoch"`
	Ops   []struct {
		ID string `cbor:"id"`
	} `cbor:"ops"`
}

func (s *signatures) record(dev int, msg []byte) {
	if s.w.cfg.atproto() {
		s.recordRepoCommit(dev, msg) // format.go
		return
	}
	var f signedFields
	if err := cbor.Unmarshal(msg, &f); err != nil {
		s.w.violation(VEquivocate, dev, "the chain key signed bytes that are not a commit: %v", err)
		return
	}
	sc := signedCommit{dev: dev, seq: f.Seq, epoch: f.Epoch, ops: len(f.Ops), digest: sha256.Sum256(msg), at: s.w.ev.now()}
	s.w.ev.add(dev, "sign", "seq=%d epoch=%d ops=%d %s", sc.seq, sc.epoch, sc.ops, short(sc.digest[:]))
	s.mu.Lock()
	if _, ok := s.all[sc.digest]; !ok {
		s.all[sc.digest] = sc
	}
	slot := [2]uint64{sc.seq, sc.epoch}
	first, seen := s.bySlot[slot]
	if !seen {
		s.bySlot[slot] = sc
	}
	s.mu.Unlock()
	if seen && first.digest != sc.digest {
		s.w.violation(VEquivocate, dev, "the chain key signed two different commits for seq %d epoch %d: %s (dev%d at %.3fs) and %s (dev%d)",
			sc.seq, sc.epoch, short(first.digest[:]), first.dev, first.at.Seconds(), short(sc.digest[:]), dev)
	}
}

// markApplied notes an applied commit; it reports false for a commit the key never
// signed.
func (s *signatures) markApplied(raw []byte) bool {
	if s.w.cfg.atproto() {
		_, d, ok := repoDigest(raw) // format.go
		if !ok {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.applied[d] = true
		_, ok = s.all[d]
		return ok
	}
	c, err := chain.Decode(raw)
	if err != nil {
		return false
	}
	c.Sig = nil
	msg, err := chain.SigningBytes(c)
	if err != nil {
		return false
	}
	d := sha256.Sum256(msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[d] = true
	_, ok := s.all[d]
	return ok
}

// counts returns the distinct commits signed and those never applied.
func (s *signatures) counts() (signed, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d := range s.all {
		if !s.applied[d] {
			refused++
		}
	}
	return len(s.all), refused
}

func short(b []byte) string {
	h := hex.EncodeToString(b)
	if len(h) > 10 {
		h = h[:10]
	}
	return h
}
