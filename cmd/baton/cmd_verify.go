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

Exit status 0 prints the head (seq, hash); 1 prints the first problem and its seq.`

const verifyExample = `  baton export --data /tmp/b1 > chain.ndjson
  baton verify --chain did:key:z6Mk... chain.ndjson
  baton export --data /tmp/b1 | baton verify --data /tmp/b1`

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
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
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
		head, n, err := verifyExport(in, *chainDID)
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

// verifyExport checks an NDJSON export from seq 1 and returns its head and length.
func verifyExport(r io.Reader, did string) (chain.Head, int, error) {
	v, err := exportVerifier(did)
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
func exportVerifier(did string) (interface {
	Next(raw []byte) (chain.Commit, error)
	Head() chain.Head
}, error) {
	if f, err := signer.ChainFormatOfDID(did); err == nil && f == chain.FormatAtproto {
		return atproto.NewChainVerifier(did), nil
	}
	return chain.NewChainVerifier(did, chain.Head{})
}
