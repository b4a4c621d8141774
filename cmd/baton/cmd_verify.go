package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/device"
)

const verifyLong = `Verifies an exported chain (NDJSON from ` + "`baton export`" + ` or GET /v1/commits): every
commit decodes canonically, its signature verifies under the chain's did:key, it links
to the previous commit's hash with seq+1 and its epoch never decreases; each line's
seq and hash must match its commit. Reads FILE, or stdin when FILE is - or absent.
--chain defaults to the chain of the device in --data, if that is initialized.

A partial export (` + "`baton export --from N`" + `) is checked from a trusted head:
--after SEQ:HASH[:EPOCH] names the commit before its first line (SEQ = N-1; HASH as a
previous verify or ` + "`baton status`" + ` printed it; EPOCH, if given, is the least epoch
the next commit may carry). The first line must then be seq SEQ+1 and link to HASH.

Exit status 0 prints the head (seq, hash); 1 prints the first problem and its seq.`

const verifyExample = `  baton export --data /tmp/b1 > chain.ndjson
  baton verify --chain did:key:z6Mk... chain.ndjson
  baton export --data /tmp/b1 | baton verify --data /tmp/b1
  baton export --data /tmp/b1 --from 101 | baton verify --data /tmp/b1 --after 100:9f86d0...`

// maxExportLine bounds one NDJSON line (a commit is bounded by the batch limits; this
// leaves room and still refuses garbage without exhausting memory).
const maxExportLine = 64 << 20

// exportLine is one line of the commits NDJSON.
type exportLine struct {
	Seq    uint64 `json:"seq"`
	Hash   string `json:"hash"`
	Epoch  uint64 `json:"epoch"`
	Signer string `json:"signer"`
	CBOR   string `json:"cbor"`
}

func (c *cli) verifyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "verify [--chain DID] [FILE|-]", Short: "verify an exported chain", Long: verifyLong, Example: verifyExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("one FILE at most, got %d", len(args))
			}
			return nil
		}}
	chainDID := cmd.Flags().String("chain", "", "the chain's did:key (default: the chain of the device in --data)")
	data := dataFlag(cmd.Flags())
	after := cmd.Flags().String("after", "", "trusted head `SEQ:HASH[:EPOCH]` before the export's first commit (a partial export)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		from, err := parseTrustedHead(*after)
		if err != nil {
			return usagef("--after: %v", err)
		}
		if *chainDID == "" {
			d, err := device.Open(*data)
			if err != nil {
				return usagef("--chain DID is required (no initialized device in %s to take it from)", *data)
			}
			*chainDID = d.Chain
		}
		if err := signer.CheckChainDID(*chainDID); err != nil {
			return usagef("--chain: %v", err)
		}
		var in io.Reader = c.stdin
		name := "stdin"
		if len(args) == 1 && args[0] != "-" {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			in, name = f, args[0]
		}
		head, n, err := verifyExportFrom(in, *chainDID, from)
		if err != nil {
			return &exitError{code: 1, msg: fmt.Sprintf("%s: %v", name, err)}
		}
		if n == 0 {
			fmt.Fprintf(c.stdout, "ok: empty chain (0 commits)\n")
			return nil
		}
		fmt.Fprintf(c.stdout, "ok: %d commits, head seq %d hash %s epoch %d\n", n, head.Seq, hex.EncodeToString(head.Hash[:]), head.Epoch)
		return nil
	}
	return cmd
}

// parseTrustedHead parses --after SEQ:HASH[:EPOCH] ("" is the zero head: seq 1 first).
func parseTrustedHead(s string) (chain.Head, error) {
	if s == "" {
		return chain.Head{}, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return chain.Head{}, fmt.Errorf("%q: want SEQ:HASH or SEQ:HASH:EPOCH", s)
	}
	var h chain.Head
	seq, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil || seq == 0 {
		return chain.Head{}, fmt.Errorf("%q: SEQ must be a positive number", parts[0])
	}
	b, err := hex.DecodeString(parts[1])
	if err != nil || len(b) != len(h.Hash) {
		return chain.Head{}, fmt.Errorf("%q: HASH must be %d hex digits", parts[1], 2*len(h.Hash))
	}
	h.Seq = seq
	copy(h.Hash[:], b)
	if len(parts) == 3 {
		if h.Epoch, err = strconv.ParseUint(parts[2], 10, 64); err != nil {
			return chain.Head{}, fmt.Errorf("%q: EPOCH must be a number", parts[2])
		}
	}
	return h, nil
}

// verifyExportFrom checks an NDJSON export that starts after the trusted head from
// (the zero head: from seq 1) and returns its head and length.
func verifyExportFrom(r io.Reader, did string, from chain.Head) (chain.Head, int, error) {
	v, err := exportVerifier(did, from)
	if err != nil {
		return chain.Head{}, 0, err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	n := 0
	for lineNo := 1; ; lineNo++ {
		line, rerr := readLine(br, maxExportLine)
		if errors.Is(rerr, io.EOF) && len(line) == 0 {
			return v.Head(), n, nil
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return v.Head(), n, fmt.Errorf("line %d: %w", lineNo, rerr)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var l exportLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return v.Head(), n, fmt.Errorf("line %d (after seq %d): not a commit line: %v", lineNo, v.Head().Seq, err)
		}
		raw, err := base64.StdEncoding.DecodeString(l.CBOR)
		if err != nil {
			return v.Head(), n, fmt.Errorf("seq %d (line %d): cbor is not base64: %v", l.Seq, lineNo, err)
		}
		c, err := v.Next(raw)
		if err != nil {
			return v.Head(), n, fmt.Errorf("line %d: %w", lineNo, err)
		}
		h := chain.Hash(raw)
		if l.Seq != c.Seq {
			return v.Head(), n, fmt.Errorf("seq %d (line %d): the line says seq %d", c.Seq, lineNo, l.Seq)
		}
		if l.Hash != hex.EncodeToString(h[:]) {
			return v.Head(), n, fmt.Errorf("seq %d (line %d): the line's hash %q is not the commit's hash %x", c.Seq, lineNo, l.Hash, h)
		}
		if l.Epoch != c.Epoch || l.Signer != c.Signer {
			return v.Head(), n, fmt.Errorf("seq %d (line %d): the line's epoch/signer differ from the commit's", c.Seq, lineNo)
		}
		n++
	}
}

// readLine reads up to '\n' (excluded), refusing lines longer than max.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		buf = append(buf, frag...)
		if len(buf) > max {
			return nil, fmt.Errorf("line longer than %d bytes", max)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return buf, err
		}
		return buf[:len(buf)-1], nil
	}
}

// exportVerifier checks commits in the format of the chain did names (an atproto
// chain's commits replay its repository).
func exportVerifier(did string, from chain.Head) (interface {
	Next(raw []byte) (chain.Commit, error)
	Head() chain.Head
}, error) {
	if f, err := signer.ChainFormatOfDID(did); err == nil && f == chain.FormatAtproto {
		if from.Seq != 0 {
			return nil, errors.New("--after: an atproto chain's export is verified from seq 1 (its repository is replayed)")
		}
		return atproto.NewChainVerifier(did), nil
	}
	return chain.NewChainVerifier(did, from)
}
