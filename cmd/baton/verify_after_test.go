package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain"
)

// A partial export (`export --from N`) verifies from a trusted head: --after
// SEQ:HASH[:EPOCH] (a9e37ae could only verify from seq 1).
func TestVerifyPartialExportFromATrustedHead(t *testing.T) {
	k, err := chain.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var hashes [][chain.HashSize]byte
	var prev []byte
	for seq := uint64(1); seq <= 5; seq++ {
		raw, err := chain.Sign(k, chain.Commit{Seq: seq, Epoch: 2, Signer: "12D3KooWtest", Prev: prev,
			Ops: []chain.Op{{ID: fmt.Sprint("i", seq), Kind: chain.Put, Path: "a/b", Value: []byte("v")}}, Time: 1_700_000_000_000 + int64(seq)})
		if err != nil {
			t.Fatal(err)
		}
		h := chain.Hash(raw)
		prev = h[:]
		hashes = append(hashes, h)
		b, _ := json.Marshal(api.CommitJSON{Seq: seq, Hash: hex.EncodeToString(h[:]), Epoch: 2, Signer: "12D3KooWtest", CBOR: raw})
		lines = append(lines, string(b))
	}
	suffix := strings.Join(lines[3:], "\n") + "\n" // seqs 4 and 5
	did := k.DID()
	if code, _, errs := runCLI(t, nil, suffix, "verify", "--chain", did, "-"); code != 1 {
		t.Errorf("a suffix without --after: %d %q", code, errs)
	}
	code, out, errs := runCLI(t, nil, suffix, "verify", "--chain", did, "--after", "3:"+hex.EncodeToString(hashes[2][:]), "-")
	if code != 0 || !strings.Contains(out, "ok: 2 commits, head seq 5") {
		t.Errorf("verify --after 3:HASH: %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, nil, suffix, "verify", "--chain", did, "--after", "3:"+hex.EncodeToString(hashes[1][:]), "-"); code != 1 {
		t.Errorf("a wrong trusted hash: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, nil, suffix, "verify", "--chain", did, "--after", "3:"+hex.EncodeToString(hashes[2][:])+":3", "-"); code != 1 {
		t.Errorf("an epoch going back from the trusted one: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, nil, suffix, "verify", "--chain", did, "--after", "three", "-"); code != 2 {
		t.Errorf("a bad --after: %d %q", code, errs)
	}
}
